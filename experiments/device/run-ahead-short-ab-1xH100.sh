#!/usr/bin/env bash
# docs/performance.md entry 41: the re-run of the N = 1 Harmony records with `--run-ahead 1` (the default
# since entry 39) was 15-20% slower than the old records on three short-task plans (bert96 vDP D = 16,
# resnet1026 vDP D = 64, bert-large-nodrop u10-5-p14), with the host waiting under 0.05 s per iteration
# for the bound. The old records ran on other hosts, so this measures no bound, 1 and 2 on one host,
# interleaved and repeated, to tell the bound's cost from the host's.
# Run through grid_gpu.sh (it puts `harmony` on PATH, sets HARMONY_DEADLINE and tars RESULTS):
#   BUDGET_S=585 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/run-ahead-short-ab-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-runahead-short1
# Re-runnable: a finished run is skipped.
set -u
R=results/paper/1xH100-80GB-HBM3; A=$R/remeasure/run-ahead-short
mkdir -p "$A/runs" "$A/logs"
run() {  # run SIDE REP MODEL PLAN [harmony run options]
    local side=$1 rep=$2 m=$3 plan=$4; shift 4
    local out=$A/runs/$side-$rep-$m-$plan.jsonl
    [ -s "$out" ] && return
    echo "[$SECONDS s] $side $rep $m $plan"
    timeout 200 harmony run "$R/schedules/$m/$plan.json" --iters 4 --data synthetic \
        --gpu-memory 11GiB --precision tf32 --device cuda "$@" -o "$out" > "$A/logs/$side-$rep-$m-$plan.log" 2>&1 \
        || echo "FAILED ($?): $out"
    grep -h "s/iteration" "$A/logs/$side-$rep-$m-$plan.log" | cut -c1-160
}
for rep in a b; do
    for mp in bert96:vDP-N1-D16-auto resnet1026:vDP-N1-D64-auto bert-large-nodrop:vPP-N1-D600-u10-5-p14; do
        m=${mp%:*}; p=${mp#*:}
        [ "$rep" = b ] && [ "$m" = bert-large-nodrop ] && continue  # one pass: 60 s a run
        run free "$rep" "$m" "$p" --run-ahead none
        run ahead1 "$rep" "$m" "$p" --run-ahead 1
        run ahead2 "$rep" "$m" "$p" --run-ahead 2
    done
done
