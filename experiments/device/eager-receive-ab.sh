#!/usr/bin/env bash
# docs/performance.md entry 48: `harmony run --p2p-receive eager` posts every receive of a task from another
# GPU when the task starts, instead of each just before its microbatch (lazy, the default), so the
# producer's NCCL sends leave its GPU at the consumer's start and stop slowing the compute beside them
# (entries 46 and 47). The simulator predicts 4-9% shorter iterations at the larger D of 2x H200's vPP plans
# at N = 2 (`experiments/resimulate_runs.py results/paper/2xH200 --p2p-receive eager`). This A/B runs 2x
# H200 plans lazy and eager on one host, alternated, the first round of each traced (`beside_nccl` in
# its timeline). The comparison holds on any two GPUs, so it writes into the folder of the cards the call
# gets (RESULTS auto: results/paper/2xH200 or results/paper/2xH100-80GB-HBM3, remeasure/eager-receive/).
#   BUDGET_S=585 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/eager-receive-ab.sh auto x2-eager1
#   (then x2-eager2: a finished run is skipped). Two calls, about 17 minutes. Slim tree: `slim_tree.sh on 2xH200`.
# PLANS="MODEL/PLAN ..." takes other plans of the folder's schedules and AB_NAME another folder under
# remeasure/ (device README item 23: the five vPP plans that ran 13-15% slower after entry 48's re-run).
set -u
source "$(dirname "$0")/run_lib.sh"
S=results/paper/2xH200/schedules          # the plans (predictions in the records are the H200 profiles')
A=${RESULTS_DIR:?run through grid_gpu.sh}/remeasure/${AB_NAME:-eager-receive}
mkdir -p "$A"
export RUN_TIMEOUT_S=240
# first, that eager receives change no loss (tests/test_runtime_gpu.py, 2 GPUs, about 40 s)
ab_gpu_tests "$A" eager 150 eager_receives
# predicted eager/lazy (2x H200 profiles): gpt2-xl D = 64 -7.4%, gpt2-4096x12 D = 32 -9.3%, gpt2-xl D = 256 -5.9%,
# resnet1026 D = 1024 -3.8%. Each plan A B B A (round 1 traced), the short plans first.
PLANS=${PLANS:-gpt2-xl/vPP-N2-D64-auto gpt2-4096x12/vPP-N2-D32-u1-1-p2 gpt2-xl/vPP-N2-D256-auto resnet1026/vPP-N2-D1024-auto}
ab_abba "$A" "$S" --p2p-receive lazy eager $PLANS
summarize_runs "$A" --arms lazy eager
