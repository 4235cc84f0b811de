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
# The re-run above counted one allocator retry per iteration on each GPU with reserved memory at the cap
# and the same 62% slowdown. Same point, schedules searched with more headroom (made on the CPU with
#   harmony schedule $R/profiles/bert96.json --model $R/models/bert96.json --minibatch 64 --gpus 2
#     --mode vDP --gpu-memory 11GiB --headroom H --calibration $R/calibration.json -o .../schedule-hH.json):
# if the retries are the cost, they vanish and the time falls to the prediction.
H=$R/remeasure/bert96-vDP-N2-D64-headroom
for h in 0.12 0.20; do
  if [ ! -s "$H/run-h$h.jsonl" ]; then
    echo "[$SECONDS s] bert96 vDP N=2 D=64, headroom $h"
    harmony run "$H/schedule-h$h.json" --iters 4 --data synthetic --gpu-memory 11GiB \
      --precision tf32 --device cuda -o "$H/run-h$h.jsonl" > "$H/run-h$h.log" 2>&1 || echo "FAILED: $H/run-h$h.jsonl"
    tail -3 "$H/run-h$h.log"
  fi
done
