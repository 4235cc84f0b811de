"""Where the device time of Harmony runs goes: set-up against iterations, from committed run records.

Each record's summary carries `wall_s` and `setup_s` (the launcher's host phases, the time until every
worker was ready, and the slowest worker's phases, `arena` being its cudaHostRegister of the host arena).
This prints one line per run, largest arena pinning first, then the totals: how much of the runs' wall time
was host set-up (its weight init and fill run while the workers start, so the parts overlap), worker set-up
(and of it, pinning) and iterations (docs/performance.md entry 45). Column `pf` says whether the launcher
prefaulted the arena (`arena_prefault`, the default on cuda since entry 45's A/B); the pinning rate is given
for each side apart, since prefaulted pages pin about twice as fast.

Last, the baseline searches (`runs/<system>/<model>/*-best.u<U>.jsonl`, one record per candidate): how much
of their candidates' iteration time was the memcpy-traced iteration (the one after warm-up) of candidates
that lost the search, and how much of that was of candidates that were not their search's best so far when
they ran (replaying the climb). The trace is only needed for the winner's swap volume; tracing only a
candidate that leads when it runs would save that second part alone (entry 45: 2%), since the climb
reaches its best through candidates that each led when they ran.

    python experiments/setup_time.py results/paper/1xH100-80GB-HBM3 results/paper/2xH200 [--top 12]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def run_rows(root: Path) -> list[dict]:
    rows = []
    for path in sorted(root.glob("runs/harmony-v*/*/*.jsonl")):
        lines = path.read_text().splitlines()
        try:
            summary = json.loads(lines[-1])
        except (ValueError, IndexError):
            continue
        setup = summary.get("setup_s") or {}
        worker = setup.get("worker_slowest_rank") or {}
        if summary.get("record") != "summary" or not summary.get("wall_s") or "arena" not in worker:
            continue
        iters = [json.loads(line) for line in lines[:-1]]
        rows.append({"run": str(path.relative_to(root.parent)), "pinned_GB": (summary.get("host_pinned_bytes") or 0) / 1e9,
                     "arena_s": worker["arena"], "wall_s": summary["wall_s"],
                     "host_s": sum((setup.get("host") or {}).values()),
                     "ready_s": setup.get("workers_ready_after_s") or 0.0,
                     "prefault": bool(summary.get("arena_prefault")),
                     "iters_s": sum(r.get("time_s") or 0.0 for r in iters if r.get("record") == "iteration")})
    return rows


def search_trace_cost(root: Path) -> tuple[float, float, int, float]:
    """Over the baseline searches under root with two candidates or more: (seconds of every candidate's
    iterations, seconds of the traced iterations of candidates slower than their search's best, how many,
    and of those seconds the part whose candidate was not the best so far when it ran). The order the
    candidates ran in is the climb's (baselines.cli.climb, replayed on the recorded samples/s from the
    recorded start): a candidate that led when it ran could not have known it would lose."""
    from baselines.cli import climb
    from harmony.jsonio import candidate_path, read_jsonl
    total, lost, n, not_leading = 0.0, 0.0, 0, 0.0
    for final in sorted(root.glob("runs/*/*/*-best.jsonl")):
        summary_of_search = read_jsonl(final)[-1]
        search = summary_of_search.get("ubatch_search") or []
        us = [x["ubatch"] for x in search]
        cands = {}
        for u in us:
            f = candidate_path(final, u)
            lines = read_jsonl(f) if f.exists() else []
            if not lines or lines[-1].get("record") != "summary":
                continue
            summary, its = lines[-1], [r for r in lines if r.get("record") == "iteration"]
            warm = summary.get("warmup_iterations") or 0
            traced = summary.get("memcpy_trace") is not None and len(its) > warm
            cands[u] = ((summary.get("samples_per_s") or 0.0) if summary.get("status") == "ok" else 0.0,
                        sum(r.get("time_s") or 0.0 for r in its),
                        # the traced iteration is the last one the warm-up counts (train_loop)
                        (its[warm - 1].get("time_s") or 0.0) if traced else 0.0)
        if len(cands) < 2:
            continue
        order: list[int] = []

        def trial(i: int) -> float:
            order.append(i)
            return cands.get(us[i], (0.0, 0.0, 0.0))[0]
        start = summary_of_search.get("ubatch_climb_start")
        climb(trial, len(us), start=us.index(start) if start in us else None)
        ran = list(dict.fromkeys(us[i] for i in order)) + [u for u in cands if u not in {us[i] for i in order}]
        best = max(c[0] for c in cands.values())
        so_far = 0.0
        for u in ran:
            if u not in cands:
                continue
            v, iters_s, traced_s = cands[u]
            total += iters_s
            if 0 < v < best and traced_s:
                lost += traced_s
                n += 1
                if v <= so_far:
                    not_leading += traced_s
            so_far = max(so_far, v)
    return total, lost, n, not_leading


def pin_rate(rows: list[dict], prefault: bool) -> str:
    """'; pinning rate over arenas > 5 GB ...: median, range' over the rows with or without the prefault."""
    big = [r["pinned_GB"] / r["arena_s"] for r in rows
           if r["prefault"] == prefault and r["pinned_GB"] > 5 and r["arena_s"] > 0]
    if not big:
        return ""
    return (f"; pinning rate over arenas > 5 GB, {'prefaulted' if prefault else 'not prefaulted'} ({len(big)}): "
            f"median {statistics.median(big):.2f} GB/s, {min(big):.2f}-{max(big):.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", type=Path, help="results folders (results/<scale>/<hardware>)")
    p.add_argument("--top", type=int, default=12, help="runs to list, largest pinning time first")
    args = p.parse_args(argv)
    rows = [r for root in args.results for r in run_rows(root)]
    searches = [search_trace_cost(root) for root in args.results]
    total, lost, n, not_leading = (sum(x[k] for x in searches) for k in range(4))
    search_line = (f"baseline searches: candidates' iterations {total:.0f} s, of which {lost:.0f} s "
                   f"({lost / total:.0%}) were the memcpy-traced iterations of {n} candidates that lost; "
                   f"{not_leading:.0f} s ({not_leading / total:.0%}) were of candidates that were not their "
                   f"search's best so far when they ran (the rest led, then lost to a later candidate)"
                   if total else None)
    if not rows:
        print("no Harmony run records with set-up phases under " + ", ".join(map(str, args.results)))
        if search_line:
            print(search_line)
        return 1
    rows.sort(key=lambda r: -r["arena_s"])
    print(f"{'run':70s} {'pinned GB':>9s} {'pin s':>6s} {'GB/s':>5s} {'wall s':>7s} {'host s':>6s} "
          f"{'ready s':>7s} {'iters s':>7s} pf")
    for r in rows[:args.top]:
        rate = r["pinned_GB"] / r["arena_s"] if r["arena_s"] else float("nan")
        print(f"{r['run'][:70]:70s} {r['pinned_GB']:9.1f} {r['arena_s']:6.1f} {rate:5.2f} {r['wall_s']:7.1f} "
              f"{r['host_s']:6.1f} {r['ready_s']:7.1f} {r['iters_s']:7.1f} {'y' if r['prefault'] else 'n'}")
    wall = sum(r["wall_s"] for r in rows)
    part = {k: sum(r[k] for r in rows) for k in ("host_s", "ready_s", "arena_s", "iters_s")}
    print(f"{len(rows)} runs, wall {wall:.0f} s: host set-up {part['host_s']:.0f} s ({part['host_s'] / wall:.0%}; the weights' "
          f"init and fill overlap the workers' start), "
          f"workers ready after {part['ready_s']:.0f} s ({part['ready_s'] / wall:.0%}; pinning {part['arena_s']:.0f} s, "
          f"{part['arena_s'] / wall:.0%}), iterations {part['iters_s']:.0f} s ({part['iters_s'] / wall:.0%})"
          + "".join(pin_rate(rows, prefault) for prefault in (False, True)))
    if search_line:
        print(search_line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
