#!/usr/bin/env bash
# docs/performance.md entry 39: the allocator probe (h100-allocprobe1) found no allocation retries when the
# host waits for the GPU at every task, where the same plans retry 5-18 times per iteration unprobed, and
# bert96 D = 256 then reserves 7.6 GiB instead of 10.2-10.7. This measures `harmony run --run-ahead N`
# (the host waits, before a compute task allocates, for the kernels and device-to-host copies of the task
# N + 1 back) against no bound, on one host, side by side: the two figure-10 points the retries cost
# (vgg416 D = 256: C11; bert96 D = 256: C3) and bert96 D = 16 (short tasks: where a wait could leave the
# GPU idle). First the runtime's GPU tests (the run-ahead-0 cases and the trace skip among them).
# Run through grid_gpu.sh (it puts `harmony` on PATH, sets HARMONY_DEADLINE and tars RESULTS):
#   BUDGET_S=585 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/run-ahead-ab-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-runahead1
# Re-runnable: a finished run is skipped.
set -u
R=results/paper/1xH100-80GB-HBM3; A=$R/remeasure/run-ahead
mkdir -p "$A/runs" "$A/logs"
[ -s "$A/gpu-tests.log" ] || timeout 300 python3 -m pytest -q tests/test_runtime_gpu.py > "$A/gpu-tests.log" 2>&1
tail -1 "$A/gpu-tests.log"
run() {  # run SIDE MODEL D [harmony run options]
    local side=$1 m=$2 d=$3; shift 3
    local out=$A/runs/$side-$m-vPP-N1-D$d.jsonl
    [ -s "$out" ] && return
    echo "[$SECONDS s] $side $m D=$d"
    timeout 300 harmony run "$R/schedules/$m/vPP-N1-D$d-auto.json" --iters 4 --data synthetic \
        --gpu-memory 11GiB --precision tf32 --device cuda "$@" -o "$out" > "$A/logs/$side-$m-D$d.log" 2>&1 \
        || echo "FAILED ($?): $out"
    grep -h "s/iteration\|retried\|run-ahead" "$A/logs/$side-$m-D$d.log" | cut -c1-200
}
for md in vgg416:256 bert96:256 bert96:16; do
    m=${md%:*}; d=${md#*:}
    run free "$m" "$d"
    run ahead1 "$m" "$d" --run-ahead 1
    run ahead0 "$m" "$d" --run-ahead 0
done
