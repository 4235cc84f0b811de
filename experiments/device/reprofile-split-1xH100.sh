#!/usr/bin/env bash
# Performance log 31: the profiler now times a vLayer's kernels back to back behind a spin kernel and its
# host issue time apart (the old profiles timed each vLayer bare, launch gaps included, which overstated
# small microbatches: vgg416 D = 256 at u = 8 ran 0.83x its prediction). Re-profile every model that the
# committed H100 runs use, the workflow's way (paper scale: tf32, 11 GiB cap, geometric sweep), into
# remeasure/split-timing/profiles/, plus two pack checks of vgg416 (82:164 and 328:410 at u = 8: the pack's
# device and issue times against the new per-vLayer sums). Nothing else changes: the CPU side then runs
#   PYTHONPATH=. python experiments/resimulate_runs.py results/paper/1xH100-80GB-HBM3 \
#       --profiles results/paper/1xH100-80GB-HBM3/remeasure/split-timing/profiles
# which re-predicts every committed run and its bound with the new profiles (C11, C12) before any schedule
# is searched again. About 15 s a model, 9 models, plus 2 checks (~20 s each).
# Run through grid_gpu.sh (puts `harmony` on PATH, records the host, tars RESULTS):
#   BUDGET_S=400 bash experiments/device/grid_gpu.sh experiments/device/reprofile-split-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-split1
# Re-runnable: a finished profile is skipped.
set -u
# PROFILES=DIR writes the profiles elsewhere (a second host's, to compare issue times across lent hosts)
# and skips the pack checks.
R=results/paper/1xH100-80GB-HBM3; P=${PROFILES:-$R/remeasure/split-timing/profiles}
mkdir -p "$P"
for m in vgg416 bert-large-nodrop bert96 resnet1026 gpt2-xl gpt2-4096x6 gpt2-4096x12 gpt2-4096x18 gpt2-4096x24; do
  out=$P/$m.json
  [ -s "$out" ] && continue
  echo "[$SECONDS s] profile $m"
  harmony profile "$R/models/$m.json" --device cuda --precision tf32 --gpu-memory 11GiB --quiet -o "$out" \
    > "$P/$m.log" 2>&1 || echo "FAILED: $out"
  tail -1 "$P/$m.log"
done
[ -n "${PROFILES:-}" ] && exit 0
for rng in 82:164 328:410; do
  out=$P/../vgg416-${rng/:/-}-u8.check.json
  [ -s "$out" ] && continue
  echo "[$SECONDS s] vgg416 pack $rng at u=8"
  harmony profile "$R/models/vgg416.json" --device cuda --precision tf32 --gpu-memory 11GiB --ubatch 8,32 \
    --check-pack "$rng" --check-ubatch 8 -o "$out" > "${out%.json}.log" 2>&1 || echo "FAILED: $out"
  grep -A2 "^pack " "${out%.json}.log"
done
