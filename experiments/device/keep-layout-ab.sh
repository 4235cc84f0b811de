#!/usr/bin/env bash
# docs/performance.md entries 107 and 108: `harmony run --no-keep-layout` against `--keep-layout` on
# channels-last plans, A B B A per plan on one host, paper settings (11 GiB cap, TF32), ITERS iterations after
# 1 warm-up, no memcpy trace. --no-keep-layout reorders every crossing activation to NCHW and back (the
# runtime's default until entry 108, so keep1's and x2-keep1's records call that arm `default`);
# --keep-layout, the default since, moves NHWC views.
# PLANS: schedule files, run in turn (default figure 10's committed ResNet1026-cl D = 1024 plans on 2x H200:
# vPP, which sends every pack's output and input gradient to the other GPU, and vDP, which only stashes;
# item 65 passes one-GPU plans, where only stashes cross). No run starts past the deadline.
#   bash experiments/device/keep-layout-ab.sh OUTDIR     (ITERS=4, RUN_LIMIT_S=120, DEADLINE_S=420)
# CPU smoke: DEVICE=cpu PREC=fp32 CAP= PLANS=a-tiny-channels-last-schedule.json
set -uo pipefail
O=${1:?usage: keep-layout-ab.sh OUTDIR}
S=results/paper/2xH200/schedules/resnet1026-cl
PLANS=${PLANS:-"$S/vPP-N2-D1024-auto.json $S/vDP-N2-D1024-auto.json"}
DEVICE=${DEVICE:-cuda}; PREC=${PREC:-tf32}; CAP=${CAP-11GiB}
ITERS=${ITERS:-4}; RUN_LIMIT_S=${RUN_LIMIT_S:-120}
DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-420} ))
export PYTHONUNBUFFERED=1
mkdir -p "$O"
python3 -m harmony.cli env --device "$DEVICE" --precision "$PREC" > "$O/env.json"
run() {   # run NAME SCHEDULE --[no-]keep-layout: its record NAME.jsonl (repeats: NAME.K.jsonl)
  local name=$1 plan=$2; shift 2
  if [ $(( $(date +%s) + RUN_LIMIT_S )) -gt "$DEADLINE" ]; then echo "[$SECONDS s] $name: skipped (deadline)"; return; fi
  timeout -k 15 "$RUN_LIMIT_S" python3 -m harmony.cli run "$plan" --data synthetic --precision "$PREC" \
    --device "$DEVICE" ${CAP:+--gpu-memory "$CAP"} --iters "$ITERS" --warmup 1 "$@" -o "$O/$name.jsonl" > "$O/$name.log" 2>&1 \
    || echo "[$SECONDS s] $name: FAILED (rc $?)"
  echo "[$SECONDS s] $name"
}
for plan in $PLANS; do
  p=$(basename "$plan" .json); p=${p%-auto}; p=${p%.schedule}
  run "$p-nchw.1" "$plan" --no-keep-layout
  run "$p-keep.1" "$plan" --keep-layout
  run "$p-keep.2" "$plan" --keep-layout
  run "$p-nchw.2" "$plan" --no-keep-layout
done
PYTHONPATH=.:experiments/device python3 experiments/device/run_files.py "$O"
