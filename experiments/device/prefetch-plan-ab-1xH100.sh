#!/usr/bin/env bash
# Performance log 32 on the H100. h100-alloc1 (remeasure/alloc-ab): loaded weights and stashes taken from the
# compute stream's pool ran vgg416 vDP D = 16 at 1.04x its prediction instead of 1.16x and bert96 vPP D = 64
# at 1.02x instead of 1.07x, but vgg416 vDP D = 64 ran out of memory: that pool reserved every prefetch
# before the task it overlaps, where the plan has six of them wait for that task (they do not fit beside
# it). `--load-buffers auto` now follows the plan (prediction.prefetch_waits). Each point's schedule is the
# committed one searched again so it records the plan (make-prefetch-plan-schedules.sh, same configuration),
# run two ways on one host, in alternating order: copy-stream (every run on record) and auto.
# First the GPU tests of the compute-stream pool and of the plan, and the profiler test that failed in
# h100-alloc1 (its assertion values, three times). About 35 s a run, 10 runs. Run through grid_gpu.sh:
#   BUDGET_S=585 TAIL_S=40 bash experiments/device/grid_gpu.sh experiments/device/prefetch-plan-ab-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-plan1
set -u
R=results/paper/1xH100-80GB-HBM3; A=$R/remeasure/prefetch-plan
mkdir -p "$A/runs"
if [ ! -s "$A/gpu-tests.log" ]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_runtime_gpu.py -k "compute-stream" \
    > "$A/gpu-tests.log" 2>&1; tail -3 "$A/gpu-tests.log"
  for i in 1 2 3; do
    timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_profile.py -k separates_kernels \
      2>&1 | grep -E "assert|AssertionError|passed|failed" | head -6
  done > "$A/profile-test.log"; cat "$A/profile-test.log"
fi
source "$(dirname "$0")/run_lib.sh"
k=0
for point in vgg416:vDP:64 vgg416:vDP:16 bert96:vPP:64 resnet1026:vPP:64 bert96:vPP:16; do
  IFS=: read -r m mode d <<< "$point"
  sched=$A/schedules/$m-$mode-N1-D$d.json base=$A/runs/$m-$mode-D$d
  if [ $((k % 2)) = 0 ]; then order="copy-stream auto"; else order="auto copy-stream"; fi
  for lb in $order; do one_run "$base.$lb.jsonl" "$m $mode D=$d --load-buffers $lb" "$sched" --load-buffers $lb; done
  k=$((k + 1))
done
summarize_runs "$A/runs"
