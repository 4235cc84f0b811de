#!/usr/bin/env bash
# docs/performance.md entry 53: on 2x H100, bert96 vDP D = 16 ran 1.38x its prediction and resnet1026 vDP
# D = 64 1.19x, both host-bound: each worker runs its CPU optimizer steps in two update threads, each an
# OpenMP team of cores // N threads, beside the thread that issues the GPU work. This runs those two plans
# with `--update-threads 1` against the default (2), alternated (default/one, then one/default), on one
# machine, into RESULTS/remeasure/update-threads/. What to compare: iteration time, the records'
# `host_phases` (issue_s, upd_step_s, upd_wait_grads_s) and the task spans (`experiments/resimulate_runs.py
# RESULTS --task-spans RUN`). Round 1 is memcpy-traced (`harmony timeline` beside it). About 6 minutes.
#   BUDGET_S=585 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/update-threads-ab-2xH100.sh \
#       results/paper/2xH100-80GB-HBM3 x2h100-updthreads1
# Re-runnable: a finished run is skipped.
set -u
source "$(dirname "$0")/run_lib.sh"
R=results/paper/2xH100-80GB-HBM3; A=$R/remeasure/update-threads
mkdir -p "$A"
export RUN_TIMEOUT_S=150
for round in 1 2; do
    arms="default one"; [ "$round" = 2 ] && arms="one default"
    for plan in "bert96 vDP-N2-D16-auto" "resnet1026 vDP-N2-D64-auto"; do
        set -- $plan; m=$1 p=$2
        for arm in $arms; do
            if [ "$arm" = one ]; then
                ab_one "$A" "$R/schedules" "$m" "$p" "$round" "$arm" --update-threads 1
            else
                ab_one "$A" "$R/schedules" "$m" "$p" "$round" "$arm"
            fi
        done
    done
done
summarize_runs "$A"
