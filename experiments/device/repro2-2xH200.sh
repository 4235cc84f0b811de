#!/usr/bin/env bash
# results/probes/reproduce/2xH200/PREDICTION.md (repro2): C3's tightest 2x H200 points at HEAD, Harmony's committed
# vDP plan beside swap-dp at the u its record ran, alternated H S H S on one host, so their ratio is measured
# side by side; paper settings (11 GiB cap, TF32), 6 iterations after 1 warm-up.
#   bash experiments/device/repro2-2xH200.sh OUTDIR      (POINTS='MODEL:D:U ...', REPEATS=2, RUN_LIMIT_S=120)
set -uo pipefail
O=${1:?usage: repro2-2xH200.sh OUTDIR}
IN=results/paper/2xH200
POINTS=${POINTS:-"gpt2-xl:64:16 bert96:64:32"}
REPEATS=${REPEATS:-2}; RUN_LIMIT_S=${RUN_LIMIT_S:-120}
DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-480} ))
export PYTHONUNBUFFERED=1
mkdir -p "$O"
python3 -m harmony.cli env --device cuda --precision tf32 > "$O/env.json"
COMMON=(--precision tf32 --device cuda --gpu-memory 11GiB --iters 6 --warmup 1)
for k in $(seq 1 "$REPEATS"); do
  for p in $POINTS; do
    IFS=: read -r m d u <<< "$p"
    for sys in harmony-vDP swap-dp; do
      name=$m-D$d-$sys.$k
      if [ $(( $(date +%s) + RUN_LIMIT_S )) -gt "$DEADLINE" ]; then echo "[$SECONDS s] $name: skipped (deadline)"; continue; fi
      if [ "$sys" = harmony-vDP ]; then
        args=(run "$IN/schedules/$m/vDP-N2-D$d-auto.json" --data synthetic)
      else
        args=(baseline swap-dp "$IN/models/$m.json" --minibatch "$d" --gpus 2 --ubatch "$u"
              --profile "$IN/profiles/$m.json" --calibration "$IN/calibration.json")
      fi
      timeout "$RUN_LIMIT_S" python3 -m harmony.cli "${args[@]}" "${COMMON[@]}" -o "$O/$name.jsonl" > "$O/$name.log" 2>&1 \
        || echo "[$SECONDS s] $name: FAILED (rc $?)"
      echo "[$SECONDS s] $name"
    done
  done
done
PYTHONPATH=.:experiments/device python3 experiments/device/run_files.py "$O"
