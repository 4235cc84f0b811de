#!/usr/bin/env bash
# Performance log 32, next step. On h100-samehost5's host the per-vLayer issue sums of vgg416 charged
# D = 256 (u = 8) as issue-bound (predicted 14.13 s, ran 11.6 s). Here on ONE host: the current vgg416 vDP
# D = 256 and D = 16 schedules run, then `harmony profile --check-pack` on their packs. Each check profiles
# vgg416 at the pack's u on this host, so it gives the sum of the vLayers' issue times and the pack's own
# issue time side by side, and its profile re-predicts the run (resimulate_runs.py --profiles). About 6
# minutes. Run through grid_gpu.sh:
#   BUDGET_S=585 TAIL_S=40 bash experiments/device/grid_gpu.sh experiments/device/issue-host-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-issue1
set -u
R=results/paper/1xH100-80GB-HBM3; P=$R/remeasure/issue-host
mkdir -p "$P/runs"
source "$(dirname "$0")/run_lib.sh"
for d in 256 16; do
  RUN_TIMEOUT_S=170 one_run "$P/runs/vgg416-vDP-D$d.jsonl" "vgg416 vDP D=$d" "$R/schedules/vgg416/vDP-N1-D$d-auto.json"
done
check() {   # profiled u, pack range, u of the check
  local us=$1 rng=$2 u=$3
  local out=$P/vgg416-${rng/:/-}-u$u.check.json
  [ -s "$out" ] && return 0
  echo "[$SECONDS s] vgg416 pack $rng at u=$u"
  timeout 150 harmony profile "$R/models/vgg416.json" --device cuda --precision tf32 --gpu-memory 11GiB --ubatch "$us" \
    --check-pack "$rng" --check-ubatch "$u" -o "$out" > "${out%.json}.log" 2>&1 || echo "FAILED ($?): $out"
  grep -A2 "^pack " "${out%.json}.log"
}
check 8 84:164 8       # D = 256's bwd packs (u = 8)
check 8 0:64 8
check 16 97:216 16     # D = 16's (u = 16)
check 16 45:97 16
