#!/usr/bin/env bash
# Figure 8's bert-large-nodrop vPP N = 2 D = 600 u_fwd = 50 / u_bwd = 25 (pack size 2; 2.73 s/iteration
# predicted) ran on 2x H200 (x2-grid7) from 191 s to the call's end at 551 s and left an empty log: no
# iteration in 330 s. It runs on the CPU at a small width (tests), and at N = 1 on the H100 (6.0 s/iteration).
# This re-runs it with a 60 s progress timeout: after 90 s without an iteration the launcher has every
# worker write each thread's Python stack to the log (faulthandler) and ends the run with an error record;
# nvidia-smi samples the two GPUs meanwhile (busy = slow, idle = waiting). Into RESULTS/remeasure/stall/,
# the figure's records untouched. About 2.5 minutes.
#   BUDGET_S=200 TAIL_S=0 bash experiments/device/grid_gpu.sh experiments/device/stall-2xH200.sh \
#       results/paper/2xH200 x2-stall1
set -u
source "$(dirname "$0")/run_lib.sh"
R=${RESULTS_DIR:-results/paper/2xH200}; A=$R/remeasure/stall
mkdir -p "$A"
out=$A/bert-large-nodrop-vPP-N2-D600-u50-25-p2.jsonl
( for i in 1 2 3 4 5 6 7 8; do sleep 15; echo "[$SECONDS s]"; \
    nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader; done ) > "$A/nvidia-smi.txt" 2>&1 &
RUN_TIMEOUT_S=170 one_run "$out" "bert-large-nodrop vPP N=2 D=600 u=50/25 p2, 60 s progress timeout" \
    "$R/schedules/bert-large-nodrop/vPP-N2-D600-u50-25-p2.json" --iters 4 --timeout 60
kill %1 2>/dev/null
grep -c "most recent call first" "${out%.jsonl}.log" || true
