#!/usr/bin/env bash
# docs/performance.md entry 105: figure 10's committed ResNet1026 vDP D = 1024 plan and swap-dp at its
# recorded u = 256, each as committed (NCHW) and with channels-last activations (ResNetConfig.channels_last:
# a copy of the schedule's and the model's record with the override set), alternated on one 2x H200 host;
# paper settings (11 GiB cap, TF32), ITERS iterations after 1 warm-up. No run starts past the deadline.
#   bash experiments/device/channels-last-ab-2xH200.sh OUTDIR     (ITERS=4, RUN_LIMIT_S=150, DEADLINE_S=540)
set -uo pipefail
O=${1:?usage: channels-last-ab-2xH200.sh OUTDIR}
IN=results/paper/2xH200
ITERS=${ITERS:-4}; RUN_LIMIT_S=${RUN_LIMIT_S:-150}
DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-540} ))
export PYTHONUNBUFFERED=1
mkdir -p "$O/in"
python3 -m harmony.cli env --device cuda --precision tf32 > "$O/env.json"
# the channels-last copies: the runtime and the baselines rebuild the model from its source's overrides
python3 - "$IN" "$O/in" <<'PY'
import json, sys
src, dst = sys.argv[1], sys.argv[2]
def cl(model):
    model["config"]["channels_last"] = True
    model["source"].setdefault("overrides", {})["channels_last"] = True
    return model
s = json.load(open(f"{src}/schedules/resnet1026/vDP-N2-D1024-auto.json"))
cl(s["model"])
json.dump(s, open(f"{dst}/vDP-N2-D1024-cl.json", "w"))
json.dump(cl(json.load(open(f"{src}/models/resnet1026.json"))), open(f"{dst}/resnet1026-cl.json", "w"))
PY
COMMON=(--precision tf32 --device cuda --gpu-memory 11GiB --iters "$ITERS" --warmup 1)
SWAP=(--minibatch 1024 --gpus 2 --ubatch 256 --profile "$IN/profiles/resnet1026.json" --calibration "$IN/calibration.json")
run() {   # run NAME -- harmony arguments...
  local name=$1; shift 2
  if [ $(( $(date +%s) + RUN_LIMIT_S )) -gt "$DEADLINE" ]; then echo "[$SECONDS s] $name: skipped (deadline)"; return; fi
  timeout "$RUN_LIMIT_S" python3 -m harmony.cli "$@" "${COMMON[@]}" -o "$O/$name.jsonl" > "$O/$name.log" 2>&1 \
    || echo "[$SECONDS s] $name: FAILED (rc $?)"
  echo "[$SECONDS s] $name"
}
run harmony-nchw -- run "$IN/schedules/resnet1026/vDP-N2-D1024-auto.json" --data synthetic
run harmony-cl -- run "$O/in/vDP-N2-D1024-cl.json" --data synthetic
run swap-dp-nchw -- baseline swap-dp "$IN/models/resnet1026.json" "${SWAP[@]}"
run swap-dp-cl -- baseline swap-dp "$O/in/resnet1026-cl.json" "${SWAP[@]}"
PYTHONPATH=.:experiments/device python3 experiments/device/run_files.py "$O"
