#!/usr/bin/env bash
# Points off figure 10's grid, predicted before any run of them (docs/performance.md entry 95): does the
# simulator, whose latest change (entry 94) was fitted on figure 10's 2x H200 records, predict a D it never saw?
# For each point MODEL:D:U_DP:U_PP, side by side on one host: Harmony's searched vPP and vDP plans
# (SCHED/MODEL/{vPP,vDP}-N2-DD-auto.json, searched here on the CPU beforehand), then swap-dp at U_DP and
# swap-pp at U_PP, the microbatch sizes the model predicts fastest among those that fit
# (`predict_swap_search.py ... --cap 11GiB`). Paper settings: 11 GiB cap, TF32, 4 iterations, Harmony 1
# warm-up and the baselines 2 (as figure 10's jobs run them).
#   POINTS='bert96:32:16:16 gpt2-xl:32:8:8' bash experiments/device/holdout-2xH200.sh OUTDIR
# Knobs: IN (results/paper/2xH200: models, profiles), CAL (IN/calibration-duplex-total.json: the calibration
# the plans and predictions were made with), SCHED (results/probes/holdout/2xH200/schedules), RUN_LIMIT_S
# (150 a run), DEADLINE_S (540: no run starts that could end after it), DEVICE (cuda; `cpu` with PREC=fp32
# and CAP='' for a smoke test on a CPU folder). A run whose record exists is skipped,
# so a second call with the same OUTDIR continues. Writes OUTDIR/runs/SYSTEM/MODEL/N2-DD[-auto].jsonl and .log
# (Harmony's named after their schedules, as figure 10's are, so resimulate_runs.py finds them),
# OUTDIR/env.json; prints each record's time beside its prediction (holdout_summary.py).
set -uo pipefail
OUTDIR=${1:?usage: POINTS='MODEL:D:U_DP:U_PP ...' holdout-2xH200.sh OUTDIR}
: "${POINTS:?set POINTS='MODEL:D:U_DP:U_PP ...'}"
IN=${IN:-results/paper/2xH200}; CAL=${CAL:-$IN/calibration-duplex-total.json}
SCHED=${SCHED:-results/probes/holdout/2xH200/schedules}
RUN_LIMIT_S=${RUN_LIMIT_S:-150}; DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-540} ))
export PYTHONUNBUFFERED=1
mkdir -p "$OUTDIR"
DEVICE=${DEVICE:-cuda}; PREC=${PREC:-tf32}; CAP=${CAP-11GiB}
[ -s "$OUTDIR/env.json" ] || python3 -m harmony.cli env --device "$DEVICE" --precision "$PREC" > "$OUTDIR/env.json"
COMMON=(--precision "$PREC" --device "$DEVICE" --iters 4); [ -n "$CAP" ] && COMMON+=(--gpu-memory "$CAP")

one() {   # one SYSTEM MODEL NAME -- harmony arguments...: one bounded run into OUTDIR/runs, skipped if recorded
  local sys=$1 m=$2 d=$3; shift 4
  local out=$OUTDIR/runs/$sys/$m/N2-$d.jsonl
  [ -s "$out" ] && return 0
  if [ $(( $(date +%s) + RUN_LIMIT_S )) -gt "$DEADLINE" ]; then echo "[$SECONDS s] no time left for $sys $m $d"; return 0; fi
  mkdir -p "$(dirname "$out")"
  echo "[$SECONDS s] $sys $m $d"
  timeout "$RUN_LIMIT_S" python3 -m harmony.cli "$@" -o "$out" > "${out%.jsonl}.log" 2>&1 || echo "FAILED (rc $?): $out"
  tail -1 "${out%.jsonl}.log"
}

for p in $POINTS; do
  IFS=: read -r m d udp upp <<< "$p"
  for mode in vPP vDP; do
    one "harmony-$mode" "$m" "D$d-auto" -- run "$SCHED/$m/$mode-N2-D$d-auto.json" --data synthetic --warmup 1 "${COMMON[@]}"
  done
  base=(--minibatch "$d" --gpus 2 --warmup 2 --profile "$IN/profiles/$m.json" --calibration "$CAL" "${COMMON[@]}")
  one swap-dp "$m" "D$d" -- baseline swap-dp "$IN/models/$m.json" --ubatch "$udp" "${base[@]}"
  one swap-pp "$m" "D$d" -- baseline swap-pp "$IN/models/$m.json" --ubatch "$upp" "${base[@]}"
done

python3 "$(dirname "$0")/holdout_summary.py" "$OUTDIR/runs"
