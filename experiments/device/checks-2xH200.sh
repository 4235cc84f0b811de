#!/usr/bin/env bash
# Performance log 16's measurement on nvidia-h200-x2: bert96 vDP, N = 2, D = 64 ran 62% slower than
# predicted with its reserved memory at the 11 GiB cap. Run the same schedule again; its record now counts
# the caching allocator's retries per iteration (alloc_retries) and names the allocator settings.
#   bash experiments/device/grid_gpu.sh experiments/device/checks-2xH200.sh results/paper/2xH200 x2-checks
# Re-runnable: a finished run is skipped (about 60 s).
set -u
R=results/paper/2xH200; D=$R/remeasure/bert96-vDP-N2-D64
mkdir -p "$D"
if [ ! -s "$D/run.jsonl" ]; then
  echo "[$SECONDS s] bert96 vDP N=2 D=64, the committed schedule again"
  harmony run "$R/schedules/bert96/vDP-N2-D64-auto.json" --iters 4 --data synthetic --gpu-memory 11GiB \
    --precision tf32 --device cuda -o "$D/run.jsonl" > "$D/run.log" 2>&1 || echo "FAILED: $D/run.jsonl"
  tail -3 "$D/run.log"
fi
