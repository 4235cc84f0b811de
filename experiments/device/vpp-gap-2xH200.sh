#!/usr/bin/env bash
# docs/performance.md entry 46: figure 10's vPP runs at N = 2 on 2x H200 took 1.17-1.46x their prediction
# (bert96 D = 16 0.616 s against 0.423; gpt2-xl D = 256 15.45 against 11.51; resnet1026 D = 1024 5.88
# against 5.02), while vDP at the same D is within 4-12%. The records have no trace, so where the time goes
# (the GPU idle waiting for the host, for a peer's activations, for host copies) is not known. This re-runs
# those three plans with the memcpy trace (one traced iteration per rank, then `harmony timeline`), into
# RESULTS/remeasure/vpp-gap/, leaving the figure records alone; then bert96 D = 256 (9-11 allocator
# retries per iteration, reserved at the cap against 9.4 GiB predicted) with the per-task memory probe
# (HARMONY_TASK_PEAKS; its times are not the run's), for `resimulate_runs.py --task-peaks`. About 7 minutes.
#   BUDGET_S=585 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/vpp-gap-2xH200.sh \
#       results/paper/2xH200 x2-vppgap1
# Re-runnable: a finished run is skipped.
set -u
source "$(dirname "$0")/run_lib.sh"
R=${RESULTS_DIR:-results/paper/2xH200}; A=$R/remeasure/vpp-gap
mkdir -p "$A"
export RUN_TIMEOUT_S=240
for run in "bert96 16" "resnet1026 1024" "gpt2-xl 256"; do
    set -- $run; m=$1 d=$2
    out=$A/$m-vPP-N2-D$d-traced.jsonl
    one_run "$out" "$m vPP N=2 D=$d, traced" "$R/schedules/$m/vPP-N2-D$d-auto.json" --memcpy-trace
    [ -s "$out" ] && python3 -m harmony.cli timeline "$out" > "${out%.jsonl}.timeline.txt" 2>&1
    # the model's side of the same iteration, to set beside the timeline (seconds, no GPU)
    python3 experiments/resimulate_runs.py "$R" --breakdown "$R/schedules/$m/vPP-N2-D$d-auto.json" \
        > "${out%.jsonl}.simulated.txt" 2>&1
done
P=$A/peaks-bert96-vPP-N2-D256
RUN_ENV="HARMONY_TASK_PEAKS=$P" one_run "$P.jsonl" "bert96 vPP N=2 D=256, per-task memory probe" \
    "$R/schedules/bert96/vPP-N2-D256-auto.json" --iters 3
[ -d "$P" ] && python3 experiments/resimulate_runs.py "$R" --task-peaks "$R/schedules/bert96/vPP-N2-D256-auto.json" "$P" \
    > "$P.txt" 2>&1 && head -15 "$P.txt"
summarize_runs "$A"
