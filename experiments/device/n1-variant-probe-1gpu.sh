#!/usr/bin/env bash
# Device README item 67 (docs/performance.md entry 108): figure 10's ResNet1026 D = 1024 point at N = 1,
# where the H100's C10 ratio is 1.36x swap-dp (11.03 against 14.98 s), measured on one H200 in both layouts:
# Harmony's one-GPU plan (searched from 2x H200's profiles at N = 1, experiments/device/schedules/) and swap-dp
# at u = 256 (the H100's best, and the simulator's best that fits here), NCHW then channels-last, so one host
# gives both ratios. Paper settings (11 GiB cap, TF32), ITERS iterations, the first a warm-up, as figure 10's
# records. No run starts past the deadline. Item 72 (entry 112) runs the same pair at D = 256 (D=256), where
# the plans are shorter, in ROUNDS rounds (the second round's records end in -r2), so one host gives a spread.
# Item 73 runs the other baselines beside Harmony there: BASELINES lists SYSTEM:U pairs (default swap-dp:U),
# LAYOUTS the models (default both), HARMONY=0 leaves Harmony's plan out.
#   bash experiments/device/n1-variant-probe-1gpu.sh OUTDIR     (ITERS=4, RUN_LIMIT_S=150, DEADLINE_S=540,
#        D=1024, U=256, ROUNDS=1, BASELINES="swap-dp:$U", LAYOUTS="resnet1026 resnet1026-cl", HARMONY=1)
set -uo pipefail
O=${1:?usage: n1-variant-probe-1gpu.sh OUTDIR}
IN=results/paper/2xH200; S=experiments/device/schedules
ITERS=${ITERS:-4}; RUN_LIMIT_S=${RUN_LIMIT_S:-150}; D=${D:-1024}; U=${U:-256}; ROUNDS=${ROUNDS:-1}
BASELINES=${BASELINES:-swap-dp:$U}; LAYOUTS=${LAYOUTS:-resnet1026 resnet1026-cl}; HARMONY=${HARMONY:-1}
DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-540} ))
export PYTHONUNBUFFERED=1
mkdir -p "$O"
python3 -m harmony.cli env --device cuda --precision tf32 > "$O/env.json"
run() {   # run NAME HARMONY_CLI_ARGS...: its record NAME.jsonl and log NAME.log
  local name=$1; shift
  if [ $(( $(date +%s) + RUN_LIMIT_S )) -gt "$DEADLINE" ]; then echo "[$SECONDS s] $name: skipped (deadline)"; return; fi
  timeout -k 15 "$RUN_LIMIT_S" python3 -m harmony.cli "$@" --iters "$ITERS" --device cuda --precision tf32 \
    --gpu-memory 11GiB -o "$O/$name.jsonl" > "$O/$name.log" 2>&1 || echo "[$SECONDS s] $name: FAILED (rc $?)"
  echo "[$SECONDS s] $name"
}
for r in $(seq 1 "$ROUNDS"); do
  sfx=""; [ "$r" -gt 1 ] && sfx="-r$r"
  for m in $LAYOUTS; do
    # D = 1024's records keep their names (item 67); other D's carry it in theirs
    tag=$m; [ "$D" != 1024 ] && tag=$m-D$D
    if [ "$HARMONY" != 0 ]; then
      [ -f "$S/$m.D$D.N1.vPP.schedule.json" ] || { echo "no schedule $S/$m.D$D.N1.vPP.schedule.json" >&2; exit 2; }
      run "$tag-harmony$sfx" run "$S/$m.D$D.N1.vPP.schedule.json" --data synthetic --warmup 1
    fi
    for b in $BASELINES; do
      run "$tag-${b%%:*}-u${b#*:}$sfx" baseline "${b%%:*}" "$IN/models/$m.json" --minibatch "$D" --gpus 1 \
        --ubatch "${b#*:}" --profile "$IN/profiles/$m.json" --calibration "$IN/calibration.json"
    done
  done
done
PYTHONPATH=.:experiments/device python3 experiments/device/run_files.py "$O"
