#!/usr/bin/env bash
# docs/performance.md entry 98: how far one host-bound Harmony plan's time moves between runs on one host, so
# that a model change is judged against that spread (entry 97: figure 10's ResNet1026 vDP D = 64 plan ran
# 0.75-1.05 s three ways on one host). Each of PLANS runs REPEATS times, interleaved (A B C D A B C D ...), so a
# drift of the host hits every plan alike; paper settings (11 GiB cap, TF32), 6 iterations, 1 warm-up. No run
# starts past the deadline (HARMONY_DEADLINE, epoch seconds; default 420 s from the start).
#   bash experiments/device/repeat-plans-2xH200.sh OUTDIR        (PLANS, SCHEDULES, REPEATS=3, RUN_LIMIT_S=90)
# Writes OUTDIR/<model>-<plan>.<k>.jsonl and .log, OUTDIR/env.json, and prints each plan's medians.
set -uo pipefail
O=${1:?usage: repeat-plans-2xH200.sh OUTDIR}
S=${SCHEDULES:-results/paper/2xH200/schedules}     # PLANS are paths under it, without .json
PLANS=${PLANS:-"resnet1026/vDP-N2-D64-auto resnet1026/vPP-N2-D64-auto bert96/vDP-N2-D16-auto bert96/vPP-N2-D16-auto"}
REPEATS=${REPEATS:-3}
RUN_LIMIT_S=${RUN_LIMIT_S:-90}
DEADLINE=${HARMONY_DEADLINE:-$(( $(date +%s) + 420 ))}
export PYTHONUNBUFFERED=1
mkdir -p "$O"
python3 -m harmony.cli env --device cuda --precision tf32 > "$O/env.json" 2> "$O/env.err"
for k in $(seq 1 "$REPEATS"); do
  for plan in $PLANS; do
    name=$(echo "$plan" | tr '/' '-').$k
    if [ "$(date +%s)" -ge "$DEADLINE" ]; then echo "[$SECONDS s] $name: skipped (deadline)"; continue; fi
    timeout "$RUN_LIMIT_S" python3 -m harmony.cli run "$S/$plan.json" --data synthetic --iters 6 --warmup 1 \
      --gpu-memory 11GiB --precision tf32 --device cuda -o "$O/$name.jsonl" > "$O/$name.log" 2>&1 \
      || echo "[$SECONDS s] $name: FAILED (rc $?)"
    echo "[$SECONDS s] $name"
  done
done
PYTHONPATH=.:experiments/device python3 experiments/device/run_files.py "$O"
