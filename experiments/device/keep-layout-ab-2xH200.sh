#!/usr/bin/env bash
# docs/performance.md entry 107: `harmony run --keep-layout` against the default on figure 10's committed
# channels-last ResNet1026 D = 1024 plans (vPP, which sends every pack's output and input gradient to the
# other GPU, and vDP, which only stashes), A B B A per plan on one 2x H200 host, paper settings (11 GiB cap,
# TF32), ITERS iterations after 1 warm-up, no memcpy trace. The default reorders every crossing activation
# to NCHW and back; --keep-layout moves NHWC views. No run starts past the deadline.
#   bash experiments/device/keep-layout-ab-2xH200.sh OUTDIR     (ITERS=4, RUN_LIMIT_S=120, DEADLINE_S=420)
set -uo pipefail
O=${1:?usage: keep-layout-ab-2xH200.sh OUTDIR}
S=results/paper/2xH200/schedules/resnet1026-cl
ITERS=${ITERS:-4}; RUN_LIMIT_S=${RUN_LIMIT_S:-120}
DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-420} ))
export PYTHONUNBUFFERED=1
mkdir -p "$O"
python3 -m harmony.cli env --device cuda --precision tf32 > "$O/env.json"
run() {   # run NAME PLAN [--keep-layout]: the plan's schedule, its record NAME.jsonl (repeats: NAME.K.jsonl)
  local name=$1 plan=$2; shift 2
  if [ $(( $(date +%s) + RUN_LIMIT_S )) -gt "$DEADLINE" ]; then echo "[$SECONDS s] $name: skipped (deadline)"; return; fi
  timeout -k 15 "$RUN_LIMIT_S" python3 -m harmony.cli run "$S/$plan-auto.json" --data synthetic --precision tf32 \
    --device cuda --gpu-memory 11GiB --iters "$ITERS" --warmup 1 "$@" -o "$O/$name.jsonl" > "$O/$name.log" 2>&1 \
    || echo "[$SECONDS s] $name: FAILED (rc $?)"
  echo "[$SECONDS s] $name"
}
for plan in vPP-N2-D1024 vDP-N2-D1024; do
  run "$plan-default.1" "$plan"
  run "$plan-keep.1" "$plan" --keep-layout
  run "$plan-keep.2" "$plan" --keep-layout
  run "$plan-default.2" "$plan"
done
PYTHONPATH=.:experiments/device python3 experiments/device/run_files.py "$O"
