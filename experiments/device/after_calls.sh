#!/usr/bin/env bash
# After a session's device calls, here (CPU machine, repository root, the project's environment active):
# everything that is derived from the records, for each results folder given, then the results page.
#   bash experiments/device/after_calls.sh results/paper/2xH200 [results/paper/1xH100-80GB-HBM3 ...]
# Per folder: every figure (and its CSV) from the records, the claims table (checks.csv), each run's
# prediction and optimizer rate again (resimulated.txt) and where set-up time went (setup_time.txt).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 RESULTS [RESULTS ...]" >&2; exit 2; }
for R in "$@"; do
    [ -d "$R" ] || { echo "$R: no such results folder" >&2; exit 2; }
    echo "== $R"
    harmony figure --all --from "$R" | tail -1
    harmony check --results "$R" | grep -E '^C(3|4|8|10|11|12) ' | cut -c1-160
    if [ -f "$R/calibration.json" ]; then python3 experiments/resimulate_runs.py "$R" > "$R/resimulated.txt"
    else echo "$R: no calibration.json (a large-scale folder): resimulated.txt not written"; fi
    python3 experiments/setup_time.py "$R" > "$R/setup_time.txt" || true    # no Harmony record with set-up phases
done
snakemake results_page --cores 1 > /dev/null 2>&1 && echo "docs/results.md rewritten"
# README's claims table is written by hand; this names every cell that no longer quotes a checks.csv
python3 -m pytest -q tests/test_readme_claims.py 2>&1 | grep -E "AssertionError|passed|failed" \
    | sed 's/^/README claims table: /' || true
