"""The run records (`harmony run -o X.jsonl`) a device script wrote into one folder, read for its summary:
repeat-plans-2xH200.sh and copies-ab-2xH200.sh print their medians from these."""
from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path

from harmony.jsonio import read_jsonl


def timed_runs(folder: str) -> Iterator[tuple[str, dict, list[dict]]]:
    """(file name, summary, iteration records after the warm-up) of every run in `folder` that has a timed
    iteration, in name order; a run that failed or never finished is left out."""
    for f in sorted(glob.glob(f"{folder}/*.jsonl")):
        recs = read_jsonl(f)
        summary = recs[-1] if recs else {}
        if not summary.get("iter_time_s"):
            continue
        its = [r for r in recs[:-1] if r.get("record") == "iteration" and r["iteration"] >= 1]
        yield Path(f).name, summary, its
