"""One line per run record (*.jsonl) in a folder: pool, time, prediction, allocator retries and memory.
What the A/B device scripts print at their end (experiments/device/run_lib.sh, summarize_runs).
With `--arms A B`, then one line per plan of an A/B whose records are named PLAN-ARM.ROUND.jsonl
(`ab_one` in run_lib.sh): each arm's iteration times over its rounds, their means, B/A and the
allocator retries (docs/performance.md entries 48 and 49 read their A/Bs so).

    python3 experiments/device/summarize_runs.py DIR [--arms A B]
"""
import glob
import json
import os
import statistics
import sys


def line(path: str) -> str:
    lines = open(path).read().splitlines()
    name = path.split("/")[-1]
    if not lines:                  # a run that failed before its first line (its log says why)
        return f"{name:<44} no record"
    s = json.loads(lines[-1])
    if s.get("status") != "ok":
        return f"{name:<44} {s.get('status')}: {(s.get('message') or '')[:160]}"
    gib = 2 ** 30
    return (f"{name:<44} {s['load_buffers']:<15} {s['iter_time_s']:7.3f} s  pred {s['predicted_iter_time_s']:7.3f}  "
            f"x{s['iter_time_s'] / s['predicted_iter_time_s']:.2f}  retries {s['alloc_retries']}  peak alloc "
            f"{max(s['peak_allocated_bytes']) / gib:.2f} reserved {max(s['peak_reserved_bytes']) / gib:.2f} GiB"
            + setup(s))


def setup(s: dict) -> str:
    """Where the run's time before its first iteration went (records with setup_s): wall, workers ready,
    the slowest worker's pinning of the host arena, and the launcher's prefault if it ran one."""
    su = s.get("setup_s") or {}
    if not s.get("wall_s") or not su:
        return ""
    pre = (su.get("host") or {}).get("arena_prefault")
    return (f"  wall {s['wall_s']:.1f} s, ready {su.get('workers_ready_after_s', 0):.1f}, pin "
            f"{(su.get('worker_slowest_rank') or {}).get('arena', 0):.1f}" + (f", prefault {pre:.1f}" if pre is not None else ""))


def ab_table(folder: str, a: str, b: str) -> list[str]:
    """Per plan: arm A's and arm B's iteration times (every round that ran ok), the means and B/A."""
    runs: dict[str, dict[str, list[tuple[int, dict]]]] = {}
    for f in glob.glob(os.path.join(folder, "*.jsonl")):
        stem, _, rnd = os.path.basename(f)[:-len(".jsonl")].rpartition(".")
        plan, _, arm = stem.rpartition("-")
        lines = open(f).read().splitlines()
        if arm not in (a, b) or not rnd.isdigit() or not lines:
            continue
        s = json.loads(lines[-1])
        if s.get("status") == "ok":
            runs.setdefault(plan, {}).setdefault(arm, []).append((int(rnd), s))
    out = [f"{'plan':<36} {a + ' s':>18} {b + ' s':>18} {b + '/' + a:>12}  retries {a} / {b}"]
    for plan, arms in sorted(runs.items()):
        sa, sb = ([s for _, s in sorted(arms.get(x, []), key=lambda r: r[0])] for x in (a, b))   # round order
        ta, tb = ([s["iter_time_s"] for s in ss] for ss in (sa, sb))
        ra, rb = ([max(s.get("alloc_retries") or [0]) for s in ss] for ss in (sa, sb))
        ratio = f"{statistics.mean(tb) / statistics.mean(ta):12.3f}" if ta and tb else f"{'-':>12}"
        out.append(f"{plan:<36} {', '.join(f'{t:.3f}' for t in ta) or '-':>18} "
                   f"{', '.join(f'{t:.3f}' for t in tb) or '-':>18} {ratio}  {ra} / {rb}")
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    for f in sorted(glob.glob(args[0] + "/*.jsonl")):
        print(line(f))
    if len(args) == 4 and args[1] == "--arms":
        print("\n".join(ab_table(args[0], args[2], args[3])))
