"""One line per run record (*.jsonl) in a folder: pool, time, prediction, allocator retries and memory.
What the A/B device scripts print at their end (experiments/device/run_lib.sh, summarize_runs).

    python3 experiments/device/summarize_runs.py DIR
"""
import glob
import json
import sys


def line(path: str) -> str:
    s = json.loads(open(path).read().splitlines()[-1])
    name = path.split("/")[-1]
    if s.get("status") != "ok":
        return f"{name:<44} {s.get('status')}: {(s.get('message') or '')[:160]}"
    gib = 2 ** 30
    return (f"{name:<44} {s['load_buffers']:<15} {s['iter_time_s']:7.3f} s  pred {s['predicted_iter_time_s']:7.3f}  "
            f"x{s['iter_time_s'] / s['predicted_iter_time_s']:.2f}  retries {s['alloc_retries']}  peak alloc "
            f"{max(s['peak_allocated_bytes']) / gib:.2f} reserved {max(s['peak_reserved_bytes']) / gib:.2f} GiB")


if __name__ == "__main__":
    for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
        print(line(f))
