"""The run records (`harmony run` / `harmony baseline -o X.jsonl`) a device script wrote into one folder, read
for its summary: copies-ab-2xH200.sh reads them, and `python3 experiments/device/run_files.py DIR` prints each
run's medians (repeat-plans-2xH200.sh, repro2-2xH200.sh and channels-last-ab-2xH200.sh end with it)."""
from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path

from harmony.jsonio import read_jsonl


def timed_runs(folder: str) -> Iterator[tuple[str, dict, list[dict]]]:
    """(file name, summary, iteration records after the warm-up: the summary's `warmup_iterations`, 2 for
    a baseline, 1 for a Harmony run) of every run in `folder` that has a timed iteration, in name order; a
    run that failed or never finished is left out."""
    for f in sorted(glob.glob(f"{folder}/*.jsonl")):
        recs = read_jsonl(f)
        summary = recs[-1] if recs else {}
        if not summary.get("iter_time_s"):
            continue
        its = [r for r in recs[:-1] if r.get("record") == "iteration" and r["iteration"] >= summary.get("warmup_iterations", 1)]
        yield Path(f).name, summary, its


def print_medians(folder: str) -> None:
    """One line per run name (the file name up to its repeat number, `NAME.K.jsonl`, or `NAME.jsonl`): each
    run's median s/iteration, their spread, the prediction and the range of the timed iterations."""
    by: dict[str, list] = {}
    for fname, s, its in timed_runs(folder):
        by.setdefault(fname.rsplit(".", 2)[0], []).append((s["iter_time_s"], s.get("predicted_iter_time_s"),
                                                           [r["time_s"] for r in its], s.get("alloc_retries")))
    for name, runs in sorted(by.items()):
        meds, pred = [m for m, *_ in runs], runs[0][1]
        times = [t for _, _, ts, _ in runs for t in ts]
        print(f"{name}: medians {', '.join(f'{m:.3f}' for m in meds)} s (max/min {max(meds) / min(meds):.2f}), "
              + (f"predicted {pred:.3f}; " if pred else "")
              + f"iterations {min(times):.3f}-{max(times):.3f}; allocator retries {[r[-1] for r in runs]}")


if __name__ == "__main__":
    import sys
    print_medians(sys.argv[1])
