#!/usr/bin/env bash
# tests/test_baselines_gpu.py on the GPU machine: resident, fsdp-offload and zero-offload against plain
# PyTorch (mlp-tiny, fp32, three iterations; fsdp-offload and zero-offload at N = 2 too where two GPUs are
# present). zero-offload had no correctness check before: DeepSpeed's ZeRO-3 offload runs only on a GPU.
# Run through grid_gpu.sh with `.whl` carried (it installs DeepSpeed and builds its CPU Adam op on first use):
#   BUDGET_S=420 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/baselines-correctness-gpu.sh \
#       results/paper/2xH200 x2-correct1
# About 5 minutes; the log and a one-line verdict go to RESULTS/remeasure/baselines-correctness/.
set -u
R=${RESULTS_DIR:-results/paper/2xH200}; A=$R/remeasure/baselines-correctness
mkdir -p "$A"
[ -s "$A/pytest.log" ] && { tail -3 "$A/pytest.log"; exit 0; }
timeout 540 python3 -m pytest -q -rs tests/test_baselines_gpu.py > "$A/pytest.log" 2>&1
echo "rc=$?" >> "$A/pytest.log"
tail -12 "$A/pytest.log"
