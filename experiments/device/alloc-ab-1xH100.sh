#!/usr/bin/env bash
# Performance log 21 on the H100. Since entry 31 the H100 runs are never faster than predicted, and the
# ones furthest over their prediction are those whose caching allocator retries at the 11 GiB cap
# (allocated peak within the plan, reserved at 10.99-11.00 GiB): vgg416 vDP D = 16 (2 retries an
# iteration, 1.19x), vgg416 vDP D = 64 (12, 1.14x), bert96 vPP D = 64 (12, 1.13x); the runs without
# retries are 0.86-1.00x. A retry waits for all pending GPU work (the host loses its lead) and frees every
# cached block. Entry 21's reading: the copy stream's pool and the compute stream's cannot serve each
# other. Each point three ways, on one host, alternated: the default; --load-buffers compute-stream (one
# pool); and garbage_collection_threshold:0.8 (the allocator reclaims unused blocks before it falls back
# to a retry). If the retries are the cost, the last two come within 5% of the prediction with ~0 retries.
# About 30 s a run, 9 runs. Run through grid_gpu.sh:
#   BUDGET_S=585 TAIL_S=60 bash experiments/device/grid_gpu.sh experiments/device/alloc-ab-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-alloc1
set -u
R=results/paper/1xH100-80GB-HBM3; A=$R/remeasure/alloc-ab
mkdir -p "$A"
source "$(dirname "$0")/run_lib.sh"
for point in vgg416:vDP:16 vgg416:vDP:64 bert96:vPP:64; do
  IFS=: read -r m mode d <<< "$point"
  sched=$R/schedules/$m/$mode-N1-D$d-auto.json
  # "default": copy-stream, the default when this ran (entry 32 made auto the default)
  one_run "$A/$m-$mode-D$d.default.jsonl" "$m $mode D=$d default" "$sched" --load-buffers copy-stream
  one_run "$A/$m-$mode-D$d.compute-stream.jsonl" "$m $mode D=$d --load-buffers compute-stream" "$sched" \
    --load-buffers compute-stream
  RUN_ENV=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,garbage_collection_threshold:0.8 \
    one_run "$A/$m-$mode-D$d.gc08.jsonl" "$m $mode D=$d garbage_collection_threshold:0.8" "$sched" \
    --load-buffers copy-stream
done
summarize_runs "$A"
