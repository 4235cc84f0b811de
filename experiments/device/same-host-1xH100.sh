#!/usr/bin/env bash
# Performance log 31, third step: profile and run on ONE host. Lent H100 hosts differ (host memcpy 40 vs
# 49 GB/s between calls h100-split1 and h100-packs1), and the vLayers' host issue times differed 2-3x
# between those two calls' profiles while their device times agreed to 1%. Pack checks (h100-packs1)
# showed a pack's device time is the sum of its vLayers' (0.98-1.01x, 7 packs). This call profiles the
# three models whose runs the split-timing profiles mispredict and runs those points again on the same
# host, so each charge (device sum only; max(device sum, issue sum)) is judged against a run of the
# profile's own host. About 60 s of profiles, 4 runs of 20-75 s.
# Run through grid_gpu.sh:
#   BUDGET_S=540 bash experiments/device/grid_gpu.sh experiments/device/same-host-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-samehost1
# TAG names the output folder (default samehost1). Re-runnable: finished steps are skipped.
set -u
R=results/paper/1xH100-80GB-HBM3; S=$R/remeasure/split-timing/${SAME_HOST_TAG:-samehost1}
mkdir -p "$S/profiles" "$S/runs"
for m in vgg416 bert-large-nodrop resnet1026; do
  out=$S/profiles/$m.json
  [ -s "$out" ] && continue
  echo "[$SECONDS s] profile $m"
  harmony profile "$R/models/$m.json" --device cuda --precision tf32 --gpu-memory 11GiB --quiet -o "$out" \
    > "$S/profiles/$m.log" 2>&1 || echo "FAILED: $out"
  tail -1 "$S/profiles/$m.log"
done
one_run() {  # one_run NAME SCHEDULE
  local out=$S/runs/$1.jsonl sched=$2
  [ -s "$out" ] && return 0
  echo "[$SECONDS s] run $1"
  timeout 150 harmony run "$sched" --data synthetic --gpu-memory 11GiB --precision tf32 --device cuda --iters 4 \
    -o "$out" > "${out%.jsonl}.log" 2>&1 || echo "FAILED: $out"
  tail -2 "${out%.jsonl}.log"
}
one_run resnet1026-vPP-D64 "$R/schedules/resnet1026/vPP-N1-D64-auto.json"
one_run vgg416-vPP-D16 "$R/schedules/vgg416/vPP-N1-D16-auto.json"
one_run bert-large-nodrop-vPP-D600-u10-5-p14 "$R/schedules/bert-large-nodrop/vPP-N1-D600-u10-5-p14.json"
one_run vgg416-vPP-D256 "$R/schedules/vgg416/vPP-N1-D256-auto.json"
one_run resnet1026-vDP-D64 "$R/schedules/resnet1026/vDP-N1-D64-auto.json"
