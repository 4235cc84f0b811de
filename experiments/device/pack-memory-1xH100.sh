#!/usr/bin/env bash
# docs/performance.md entry 38: vgg416 vPP D = 256's u = 32 plan (schedules/vgg416/vPP-N1-D256-auto.json)
# peaked 6.4% above its predicted 10.59 GB and retried 38 allocations per iteration. This runs its three
# largest packs by predicted peak alone at u = 32 (`harmony profile --check-pack`), measured against the
# additive pack rule, to find whether the rule or the runtime around the pack misses the memory.
# Run through grid_gpu.sh (it puts `harmony` on PATH and tars RESULTS):
#   BUDGET_S=200 TAIL_S=30 bash experiments/device/grid_gpu.sh experiments/device/pack-memory-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-packmem1
# Re-runnable: a finished check is skipped. Each is one profile of vgg416 at u = 32 (about 20 s) and the pack.
set -u
R=results/paper/1xH100-80GB-HBM3; D=$R/remeasure/pack-memory
mkdir -p "$D"
for rng in 247:417 164:247 0:12; do
    out=$D/vgg416-${rng/:/-}-u32.profile.json
    [ -s "$out" ] && continue
    echo "[$SECONDS s] vgg416 pack $rng at u=32"
    timeout 150 harmony profile "$R/models/vgg416.json" --device cuda --precision tf32 --gpu-memory 11GiB \
      --ubatch 32 --check-pack "$rng" --check-ubatch 32 -o "$out" > "${out%.profile.json}.log" 2>&1 \
      || echo "FAILED ($?): $out"
    grep -A2 "^pack " "${out%.profile.json}.log"
done
