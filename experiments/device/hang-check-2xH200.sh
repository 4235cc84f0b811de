#!/usr/bin/env bash
# docs/performance.md entry 107: swap-pp resnet1026-cl D = 64 at u = 8 made no progress in its first
# iteration on x2-cl6 (rank 1 in a gradient send, rank 0 inside a forward kernel launch; the watchdog ended
# it after 330 s), where NCHW's u = 8 had run. This runs that candidate alone, twice, and NCHW's once as the
# control, each with NCCL's INIT and P2P logging (when each channel's communicator is made, and how) and
# the GPUs' utilisation sampled every 0.5 s beside it: a hang with both GPUs busy is kernels spinning on a
# peer, one with both idle is a wait on the host. Paper settings (11 GiB cap, TF32), 4 iterations, 2 of
# them warm-up, as the search ran it; then, if time is left, the hung candidate's schedule with the other crossing
# layout (`harmony run --no-keep-layout` since entry 108). A run that outlasts RUN_LIMIT_S gets SIGTERM, on which the launcher
# writes every worker's stacks into its log (docs/runtime.md), and SIGKILL 15 s later; no run starts past
# the deadline.
#   bash experiments/device/hang-check-2xH200.sh OUTDIR     (RUN_LIMIT_S=120, DEADLINE_S=300)
# ONLY='cl-u8-a ...': just those runs (item 66: the hung candidate once, after entry 108's fix)
set -uo pipefail
O=${1:?usage: hang-check-2xH200.sh OUTDIR}
IN=results/paper/2xH200
RUN_LIMIT_S=${RUN_LIMIT_S:-120}
DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-300} ))
export PYTHONUNBUFFERED=1
mkdir -p "$O"
python3 -m harmony.cli env --device cuda --precision tf32 > "$O/env.json"
run() {   # run NAME HARMONY_CLI_ARGS...: one run, its record NAME.jsonl, log NAME.log, GPU samples NAME.smi.csv
  local name=$1; shift
  case " ${ONLY:-$name} " in *" $name "*) ;; *) return ;; esac
  if [ $(( $(date +%s) + RUN_LIMIT_S )) -gt "$DEADLINE" ]; then echo "[$SECONDS s] $name: skipped (deadline)"; return; fi
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,power.draw --format=csv -lms 500 \
    > "$O/$name.smi.csv" 2>&1 &
  local smi=$!
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P timeout -k 15 "$RUN_LIMIT_S" python3 -m harmony.cli "$@" \
    --iters 4 --warmup 2 --device cuda --precision tf32 --gpu-memory 11GiB -o "$O/$name.jsonl" > "$O/$name.log" 2>&1
  local rc=$?
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  # a launcher killed past its SIGTERM grace can leave its spawned workers holding both GPUs, which would
  # hang the next run too; nothing else runs beside this script
  if [ $rc = 124 ] || [ $rc = 137 ]; then pkill -9 -f 'multiprocessing.spawn' 2>/dev/null; sleep 3; fi
  echo "[$SECONDS s] $name: rc $rc$([ $rc = 124 ] && echo ' (timed out: a hang)')"
}
swap_pp() {   # swap_pp MODEL: `harmony baseline` arguments for swap-pp at D = 64, N = 2, u = 8 on MODEL's record
  echo baseline swap-pp "$IN/models/$1.json" --minibatch 64 --gpus 2 --ubatch 8 \
    --profile "$IN/profiles/$1.json" --calibration "$IN/calibration.json"
}
run cl-u8-a $(swap_pp resnet1026-cl) --schedule-out "$O/swap-pp-cl-u8.json"
run nchw-u8 $(swap_pp resnet1026)
run cl-u8-b $(swap_pp resnet1026-cl)
# the same schedule with the other crossing layout, if time is left: --keep-layout was the other one until
# entry 108 made it the default (x2-cl7's runs crossed NCHW); since then it is --no-keep-layout
if [ -s "$O/swap-pp-cl-u8.json" ]; then
  run cl-u8-nchw-crossings run "$O/swap-pp-cl-u8.json" --data synthetic --memcpy-trace --no-keep-layout
else echo "[$SECONDS s] cl-u8-nchw-crossings: skipped (no schedule)"; fi
PYTHONPATH=.:experiments/device python3 experiments/device/run_files.py "$O"
