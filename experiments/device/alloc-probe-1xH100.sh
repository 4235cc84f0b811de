#!/usr/bin/env bash
# docs/performance.md entry 38's open question: bert96 D = 256 (7.37 GiB allocated at peak, 10.25-10.74
# reserved, 4-6 retries per iteration; the C3 point) and vgg416 D = 256 (9.91 allocated, 10.96 reserved,
# 18 retries; the C11 point). The worker's task probe (HARMONY_TASK_PEAKS, docs/runtime.md) records each
# task's retries and what the caching allocator held per stream at its start; first the probe's GPU test.
# Run through grid_gpu.sh (it puts `harmony` on PATH and tars RESULTS):
#   BUDGET_S=400 TAIL_S=30 bash experiments/device/grid_gpu.sh experiments/device/alloc-probe-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-allocprobe1
# then, here: PYTHONPATH=. python experiments/resimulate_runs.py R --task-peaks R/schedules/M/vPP-N1-D256-auto.json
#   R/remeasure/alloc-probe/M-vPP-D256   (R = results/paper/1xH100-80GB-HBM3). Probed times are not the run's.
set -u
R=results/paper/1xH100-80GB-HBM3; P=$R/remeasure/alloc-probe
mkdir -p "$P"
[ -s "$P/gpu-test.log" ] || python3 -m pytest -q tests/test_runtime_gpu.py -k task_probe > "$P/gpu-test.log" 2>&1
tail -1 "$P/gpu-test.log"
for m in bert96 vgg416; do
    out=$P/$m-vPP-D256
    [ -s "$out.jsonl" ] && continue
    echo "[$SECONDS s] $m D=256 probed"
    mkdir -p "$out"
    HARMONY_TASK_PEAKS=$out timeout 240 harmony run "$R/schedules/$m/vPP-N1-D256-auto.json" --iters 3 \
        --data synthetic --gpu-memory 11GiB --precision tf32 --device cuda -o "$out.jsonl" > "$out.log" 2>&1 \
        || echo "FAILED ($?): $out"
    grep -h "s/iteration\|retried" "$out.log" | cut -c1-160
done
