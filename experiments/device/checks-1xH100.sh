#!/usr/bin/env bash
# Performance log 17's measurement on nvidia-h100-x1: does a vgg416 pack cost less, timed as a whole, than
# the sum of its vLayers' profiled times (what the simulator charges)? Packs of the committed plans:
# 82:164 at u = 8 (a BWD pack of the D = 256 plan, whose runs beat their prediction by 16%), and 82:117 at
# u = 8 and at u = 32 (a BWD pack of the D = 64 plan, u = 32, whose runs were 7% slower than predicted).
# Run through grid_gpu.sh (it puts `harmony` on PATH and tars RESULTS):
#   bash experiments/device/grid_gpu.sh experiments/device/checks-1xH100.sh results/paper/1xH100-80GB-HBM3 h100-checks
# Re-runnable: a finished check is skipped. Each is one profile of vgg416 at u = 8 and 32 (about 20 s) and the pack.
set -u
R=results/paper/1xH100-80GB-HBM3; D=$R/remeasure/pack-timing
mkdir -p "$D"
for check in 82:164@8 82:117@8 82:117@32; do
    rng=${check%@*}; u=${check#*@}
    out=$D/vgg416-${rng/:/-}-u$u.profile.json
    [ -s "$out" ] && continue
    echo "[$SECONDS s] pack $rng at u=$u"
    harmony profile "$R/models/vgg416.json" --device cuda --precision tf32 --gpu-memory 11GiB --ubatch 8,32 \
      --check-pack "$rng" --check-ubatch "$u" -o "$out" > "${out%.profile.json}.log" 2>&1 || echo "FAILED: $out"
    grep -A1 "^pack " "${out%.profile.json}.log"
done
