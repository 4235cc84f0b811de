#!/usr/bin/env bash
# Performance log 31, second step. The split-timing profiles (remeasure/split-timing/profiles) charge a pack
# max(sum of its vLayers' device times, sum of their host issue times). Re-predicting the committed H100 runs
# with them (experiments/resimulate_runs.py --profiles ...) made bert-large-nodrop u10-5 0.67x its
# prediction and vgg416 D = 256 0.79x: the sum of the vLayers' issue times, each timed alone, overstates
# the pack's. With the issue times left out, resnet1026 D = 64 ran 1.27-1.53x its prediction: issue time
# does bound some packs. This measures, for the very packs and microbatches of those runs, the pack's own
# device and issue times against the per-vLayer sums (harmony profile --check-pack), so the cost model's
# pack charge can be fitted to packs, not guessed. Each check profiles its model at the listed u first.
# Run through grid_gpu.sh:
#   BUDGET_S=540 bash experiments/device/grid_gpu.sh experiments/device/pack-issue-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-packs1
# Re-runnable: a finished check is skipped.
set -u
R=results/paper/1xH100-80GB-HBM3; P=$R/remeasure/split-timing/packs
mkdir -p "$P"
check() {   # model, profiled u list, pack range, u of the check
  local m=$1 us=$2 rng=$3 u=$4
  local out=$P/$m-${rng/:/-}-u$u.check.json
  [ -s "$out" ] && return 0
  echo "[$SECONDS s] $m pack $rng at u=$u"
  timeout 150 harmony profile "$R/models/$m.json" --device cuda --precision tf32 --gpu-memory 11GiB --ubatch "$us" \
    --check-pack "$rng" --check-ubatch "$u" -o "$out" > "${out%.json}.log" 2>&1 || echo "FAILED ($?): $out"
  grep -A2 "^pack " "${out%.json}.log"
}
check vgg416 8 82:164 8            # vgg416 D = 256 (u = 8): its bwd packs
check vgg416 8 164:417 8
check resnet1026 64 194:332 64     # resnet1026 D = 64 (u = 64): issue-bound packs
check resnet1026 64 332:515 64
check bert-large-nodrop 5,10 0:2 5     # figure 8's u10-5-p14: packs of 2 vLayers, bwd u = 5
check bert-large-nodrop 5,10 0:2 10
check bert-large-nodrop 5,10 0:28 5
check vgg416 16 77:175 16          # vgg416 D = 16 (u = 16)
check vgg416 8 0:82 8
check gpt2-xl 8 8:16 8             # gpt2-xl D = 16 (u = 8)
