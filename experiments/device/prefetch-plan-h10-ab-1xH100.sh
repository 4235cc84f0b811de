#!/usr/bin/env bash
# Performance log 32, second H100 call. In h100-plan1 the plan-following compute-stream pool (--load-buffers
# auto) ran three points 3-10% faster than copy-stream (1.02-1.03x their predictions), but the two whose plans
# peak at the 5% headroom (10.44-10.45 of 11 GiB) ran out of memory: one pool held 0.90-1.11 GiB reserved
# but unallocated in every compute-stream run. Searched with 10% headroom (HEADROOM=0.10
# make-prefetch-plan-schedules.sh) the same points predict within 0.6% of before (bert96 vPP D = 16: 2.7%
# faster). Here: auto on the 10% plans against copy-stream on the committed 5% plans, one host, alternating.
#   BUDGET_S=585 TAIL_S=40 bash experiments/device/grid_gpu.sh experiments/device/prefetch-plan-h10-ab-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-plan2
set -u
R=results/paper/1xH100-80GB-HBM3; A=$R/remeasure/prefetch-plan
mkdir -p "$A/runs-h10"
source "$(dirname "$0")/run_lib.sh"
k=0
for point in vgg416:vDP:64 resnet1026:vPP:64 vgg416:vDP:16 bert96:vPP:64 bert96:vPP:16; do
  IFS=: read -r m mode d <<< "$point"
  base=$A/runs-h10/$m-$mode-D$d
  old=("$base.h05-copy-stream.jsonl" "$m $mode D=$d 5% plan, copy-stream" "$R/schedules/$m/$mode-N1-D$d-auto.json"
       --load-buffers copy-stream)
  new=("$base.h10-auto.jsonl" "$m $mode D=$d 10% plan, auto" "$A/schedules/$m-$mode-N1-D$d-h10.json")
  if [ $((k % 2)) = 0 ]; then one_run "${old[@]}"; one_run "${new[@]}"; else one_run "${new[@]}"; one_run "${old[@]}"; fi
  k=$((k + 1))
done
summarize_runs "$A/runs-h10"
