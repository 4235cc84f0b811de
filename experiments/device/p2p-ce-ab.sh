#!/usr/bin/env bash
# docs/performance.md entry 49: NCCL_P2P_USE_CUDA_MEMCPY=1 makes NCCL move vPP's activations and gradients
# between the GPUs with the copy engines (its proxy thread's cudaMemcpyAsync) instead of its kernels' loads
# and stores. Compute beside a resident NCCL kernel ran 1.06-1.45x slower than alone (entries 46 and 48,
# traced); if the kernels that stay only wait on flags instead of copying, that slowdown should narrow.
# This A/B runs 2x H200 vPP plans at N = 2 (eager receives, the default) with and without it on one host,
# alternated, the first round of each memcpy-traced (`beside_nccl` and the NCCL kernels' time in its
# timeline). The comparison holds on any two GPUs: RESULTS auto files it under the cards' folder
# (remeasure/p2p-ce/). Every record's env.nccl_env names its arm.
#   BUDGET_S=585 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/p2p-ce-ab.sh auto x2-ce1
#   (a finished run is skipped: a second call with another tag goes on). Slim tree: `slim_tree.sh on 2xH200`.
set -u
source "$(dirname "$0")/run_lib.sh"
S=results/paper/2xH200/schedules          # the plans (predictions in the records are the H200 profiles')
A=${RESULTS_DIR:?run through grid_gpu.sh}/remeasure/p2p-ce
mkdir -p "$A"
export RUN_TIMEOUT_S=240
# first, that copy-engine sends change no loss (tests/test_runtime_gpu.py, 2 GPUs, about 40 s)
[ -s "$A/pytest-ce.log" ] || { timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py \
    -k "copy_engine" > "$A/pytest-ce.log" 2>&1; tail -1 "$A/pytest-ce.log"; }
# A = NCCL's kernels (default), B = copy engines; A B B A on the short plans, then A B on the long ones
for run in "gpt2-xl vPP-N2-D64-auto 1 kernel" "gpt2-xl vPP-N2-D64-auto 1 ce" \
           "resnet1026 vPP-N2-D256-auto 1 kernel" "resnet1026 vPP-N2-D256-auto 1 ce" \
           "gpt2-xl vPP-N2-D64-auto 2 ce" "gpt2-xl vPP-N2-D64-auto 2 kernel" \
           "resnet1026 vPP-N2-D256-auto 2 ce" "resnet1026 vPP-N2-D256-auto 2 kernel" \
           "gpt2-xl vPP-N2-D256-auto 1 kernel" "gpt2-xl vPP-N2-D256-auto 1 ce" \
           "resnet1026 vPP-N2-D1024-auto 1 kernel" "resnet1026 vPP-N2-D1024-auto 1 ce"; do
    set -- $run
    env_arm=""; [ "$4" = ce ] && env_arm="NCCL_P2P_USE_CUDA_MEMCPY=1"
    RUN_ENV=$env_arm ab_one "$A" "$S" "$1" "$2" "$3" "$4"
done
summarize_runs "$A" --arms kernel ce
