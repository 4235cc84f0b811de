#!/usr/bin/env bash
# docs/performance.md entry 77: `harmony run --allreduce overlap` lets the next task compute while a pack's
# gradients are all-reduced (only their copy to the host waits for the collective), where the default,
# inline, makes the compute stream wait for it and for the other rank to reach it. vDP's backward tasks at
# N = 2 on 2x H200 run 0.03-0.24 s per iteration longer than their profile (task spans), and vPP's do not;
# the traced NCCL busy time bounds what the overlap can win: about 0.02 s per iteration at BERT96 D = 64.
# This A/B runs figure 10's vDP plans at N = 2 inline and overlapped on one host, alternated (A B B A, round 1
# traced: `harmony timeline` gives NCCL busy and compute beside NCCL). Writes into the folder of the cards
# the call gets (remeasure/allreduce-overlap/).
#   BUDGET_S=585 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/allreduce-overlap-ab.sh auto x2-arov1
#   (then x2-arov2: a finished run is skipped). Slim tree: `slim_tree.sh on 2xH200` (with SLIM_ALSO, device README).
set -u
source "$(dirname "$0")/run_lib.sh"
S=results/paper/2xH200/schedules          # the plans (predictions in the records are the H200 profiles')
A=${RESULTS_DIR:?run through grid_gpu.sh}/remeasure/${AB_NAME:-allreduce-overlap}
mkdir -p "$A"
export RUN_TIMEOUT_S=240
# first, that the overlap changes no loss (tests/test_runtime_gpu.py, 2 GPUs: the bitwise test and the
# allreduce-overlap cases against plain PyTorch)
ab_gpu_tests "$A" overlap 240 "overlapped_all_reduce or allreduce-overlap"
# measured/predicted now: bert96 D = 16 1.17, gpt2-xl D = 16 1.03, bert96 D = 64 1.03, gpt2-xl D = 64 1.03;
# predicted gain (entry 77): 1-4% at D = 16 and 64 (the model alone: 0.6-2.5%); the short plans first
PLANS=${PLANS:-bert96/vDP-N2-D16-auto gpt2-xl/vDP-N2-D16-auto bert96/vDP-N2-D64-auto gpt2-xl/vDP-N2-D64-auto}
ab_abba "$A" "$S" --allreduce inline overlap $PLANS
summarize_runs "$A" --arms inline overlap
