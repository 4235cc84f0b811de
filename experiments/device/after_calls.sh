#!/usr/bin/env bash
# After a session's device calls, here (CPU machine, repository root, the project's environment active):
# everything that is derived from the records, for each results folder given, then the results page.
#   bash experiments/device/after_calls.sh results/paper/2xH200 [results/paper/1xH100-80GB-HBM3 ...]
# Per folder: every figure (and its CSV) from the records, the claims table (checks.csv), each run's
# prediction and optimizer rate again (resimulated.txt), where set-up time went (setup_time.txt), and the
# swap searches that left an untried u predicted much faster than their best (predict_swap_search.py).
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
    # a swap search whose climb may have stopped at a local peak: an untried u predicted under 0.8x its best
    # measured time (docs/performance.md entry 113); prints the points so named and their count, per system and N.
    # Rows "missing" have no record (a folder being filled, results/paper/1xH200) and are left out.
    if [ -f "$R/figure10.csv" ] && [ -f "$R/calibration.json" ]; then
        for sys in swap-dp swap-pp; do
            recs=$(awk -F, -v s=$sys 'NR > 1 && $7 == s && $10 == "measured" && $11 != "missing" {print $8, $4 ":" $6}' \
                "$R/figure10.csv" | sort -u)
            for n in $(cut -d' ' -f1 <<< "$recs" | sort -u); do
                pts=$(awk -v n=$n '$1 == n {print $2}' <<< "$recs")
                PYTHONPATH=.:experiments python3 experiments/predict_swap_search.py "$R" $sys $n $pts --measured \
                    --untried-faster 0.8 | grep -E "untried u=|point\(s\) with" | sed "s/^# /$sys N = $n: /" || true
            done
        done
    fi
done
snakemake results_page --cores 1 > /dev/null 2>&1 && echo "docs/results.md rewritten"
# README's claims table is written by hand; this names every cell that no longer quotes a checks.csv
python3 -m pytest -q tests/test_readme_claims.py 2>&1 | grep -E "AssertionError|passed|failed" \
    | sed 's/^/README claims table: /' || true
