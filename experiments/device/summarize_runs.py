"""One line per run record (*.jsonl) in a folder: pool, time, prediction, allocator retries and memory.
What the A/B device scripts print at their end (experiments/device/run_lib.sh, summarize_runs).

    python3 experiments/device/summarize_runs.py DIR
"""
import glob
import json
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


if __name__ == "__main__":
    for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
        print(line(f))
