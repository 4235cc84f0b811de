#!/usr/bin/env bash
# docs/performance.md entry 45: over 51 Harmony records, 23% of a run's wall time was the workers pinning
# the host arena (cudaHostRegister at about 2 GB/s: 67 s of vgg416 vPP D = 256's 147 s). This measures
# `harmony run --arena-prefault` (the launcher gives those pages their memory on several threads while the
# workers start) against the default, on one host, on the two largest arenas of figure 10 at N = 1, in the
# order off/on then on/off. What to compare: each record's setup_s (workers_ready_after_s, the worker
# phase `arena`, the host phase `arena_prefault`) and wall_s; the iterations should not change. It first
# runs experiments/device/trace_probe.py (seconds) into remeasure/trace-probe.txt.
# Run through grid_gpu.sh (it puts `harmony` on PATH, sets HARMONY_DEADLINE and tars RESULTS):
#   BUDGET_S=585 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/prefault-ab-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-prefault1
# Re-runnable: a finished run is skipped.
set -u
source "$(dirname "$0")/run_lib.sh"
R=results/paper/1xH100-80GB-HBM3; A=$R/remeasure/arena-prefault
mkdir -p "$A"
# first, seconds: can the memcpy trace take its bytes from the profiler's in-memory events (entry 45)?
P=$R/remeasure/trace-probe.txt
[ -s "$P" ] || timeout 120 python3 experiments/device/trace_probe.py > "$P" 2>&1; tail -3 "$P"
export RUN_TIMEOUT_S=300
# the prefault is the default on cuda since this A/B (h100-prefault1); "off" says so explicitly
for run in "off vgg416 256 --no-arena-prefault" "on vgg416 256 --arena-prefault" \
           "on resnet1026 1024 --arena-prefault" "off resnet1026 1024 --no-arena-prefault"; do
    set -- $run; side=$1 m=$2 d=$3; shift 3
    one_run "$A/$side-$m-vPP-N1-D$d.jsonl" "$side $m D=$d" "$R/schedules/$m/vPP-N1-D$d-auto.json" --iters 4 "$@"
done
summarize_runs "$A"
