#!/usr/bin/env bash
# docs/performance.md entry 102: vDP plans whose every rank copies and steps its 1/N of each pack's gradients
# (ScheduleConfig.shard_updates) against the same plans with one rank per pack, interleaved on one host
# (repeat-plans-2xH200.sh; schedules in results/probes/shard-updates/2xH200/schedules/, written by
# experiments/shard_schedule.py and `harmony schedule`). Paper settings (11 GiB cap, TF32).
#   call shard1: GPU_TESTS=1 PLANS='gpt2-xl/old gpt2-xl/sharded bert96/old bert96/sharded' bash ... OUTDIR
#       first the GPU test of sharded updates (bitwise the unsharded run on two GPUs) and the all-reduce's
#   call shard2: RERUN_LIST=LIST RERUN_TAG=TAG PLANS='vgg416/old vgg416/search' bash ... OUTDIR
#       first figure 10's records the change makes stale, run again on the same host (grid_gpu.sh LIST)
#   env: REPEATS=3, BUDGET_S=560 (the whole call), GPU_TESTS_S=150, RERUN_BUDGET_S=240
set -uo pipefail
O=${1:?usage: shard-updates-2xH200.sh OUTDIR}
P=results/probes/shard-updates/2xH200
mkdir -p "$O"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=uuid,name --format=csv,noheader > "$O/gpus.txt" 2>&1
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-560} ))
if [ "${GPU_TESTS:-0}" = 1 ]; then
  timeout "${GPU_TESTS_S:-150}" python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -k "sharded or overlapped" \
    > "$O/gpu-tests.log" 2>&1
  echo "[$SECONDS s] GPU tests: $(tail -n 1 "$O/gpu-tests.log")"
fi
if [ -n "${RERUN_TAG:-}" ]; then
  BUDGET_S=${RERUN_BUDGET_S:-240} bash experiments/device/grid_gpu.sh "${RERUN_LIST:?set RERUN_LIST}" \
    results/paper/2xH200 "$RERUN_TAG" 2>&1 | tail -n 6
fi
SCHEDULES=$P/schedules PLANS=${PLANS:?set PLANS} REPEATS=${REPEATS:-3} RUN_LIMIT_S=75 \
  HARMONY_DEADLINE=$DEADLINE bash experiments/device/repeat-plans-2xH200.sh "$O/runs"
