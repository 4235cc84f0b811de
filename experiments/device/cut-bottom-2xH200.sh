#!/usr/bin/env bash
# docs/performance.md entry 101: the search's bottom cuts (search.bottom_cut_points) on the one figure-10 plan
# on 2x H200 they move by 2% or more, GPT2-XL vDP D = 16 at N = 2. Plans interleaved, three times each on one
# host (repeat-plans-2xH200.sh): figure 10's plan before the change (`old`), a plan of the search (`cut`: the
# first version's, 17 packs, call cut1; `final`: the committed search's, 19 packs, call cut2) and swap-dp at
# its figure-10 microbatch (u = 8), so C3 at this point is read on one host. Paper settings (11 GiB cap, TF32).
#   call cut1: GPU_TESTS=1 PLANS='gpt2-xl/old gpt2-xl/cut gpt2-xl/swapdp-u8' bash ... OUTDIR
#       first the runtime's vDP GPU tests (the all-reduce's GradSpan refactor of entry 99's review)
#   call cut2: RERUN_TAG=x2-cut2 PLANS='gpt2-xl/old gpt2-xl/final gpt2-xl/swapdp-u8' bash ... OUTDIR
#       first figure 10's two records at this point on the same host (experiments/device/rerun-cut-bottom-2xH200.sh:
#       Harmony vDP on the rewritten schedule, swap-dp at its u = 8), tarball $OUT/TAG.tgz
#   call cut3: PLANS="holdout/gpt2-xl-D32-old holdout/gpt2-xl-D32-new holdout/bert96-D32-old holdout/bert96-D32-new"
#       entry 95's held-out D = 32 vDP points, the holdout's plans against today's search's
#   env: REPEATS=3, BUDGET_S=560 (the whole call), GPU_TESTS_S=200
set -uo pipefail
O=${1:?usage: cut-bottom-2xH200.sh OUTDIR}
P=results/probes/cut-bottom/2xH200
mkdir -p "$O"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=uuid,name --format=csv,noheader > "$O/gpus.txt" 2>&1
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-560} ))
if [ "${GPU_TESTS:-0}" = 1 ]; then
  timeout "${GPU_TESTS_S:-200}" python3 -m pytest -q -m gpu tests/test_runtime_gpu.py -k "vDP or all_reduce" \
    > "$O/gpu-tests.log" 2>&1
  echo "[$SECONDS s] GPU tests: $(tail -n 1 "$O/gpu-tests.log")"
fi
if [ -n "${RERUN_TAG:-}" ]; then
  BUDGET_S=${RERUN_BUDGET_S:-200} bash experiments/device/grid_gpu.sh experiments/device/rerun-cut-bottom-2xH200.sh \
    results/paper/2xH200 "$RERUN_TAG" 2>&1 | tail -n 6
fi
SCHEDULES=$P/schedules PLANS=${PLANS:?set PLANS} REPEATS=${REPEATS:-3} RUN_LIMIT_S=75 \
  HARMONY_DEADLINE=$DEADLINE bash experiments/device/repeat-plans-2xH200.sh "$O/runs"
