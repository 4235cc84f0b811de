#!/usr/bin/env bash
# Device README item 27, first half (docs/performance.md entry 61): on the GPU host, the worker's dropout
# seeding (the device's generator only) against torch.manual_seed (every backend; a formatted stack trace
# per backend not initialised), in one process, on a 32-layer bert-tiny with dropout; then the GPU test
# that the new seeding draws the same masks as torch.manual_seed on CUDA. About a minute, any GPU(s):
#   bash experiments/device/grid_gpu.sh experiments/device/seeding-ab.sh auto TAG
# (`auto`: the results folder of the hardware the call got; grid_gpu.sh sets RESULTS_DIR). Writes
# RESULTS_DIR/remeasure/seeding/{ab,gpu-test}.txt; a file already there is not made again.
# Predicted before any run: the all-backends row 0.4-1.0 ms per vLayer above the device row.
set -u
D=${RESULTS_DIR:?run it through grid_gpu.sh, which sets RESULTS_DIR}/remeasure/seeding
mkdir -p "$D"
if [ ! -s "$D/ab.txt" ]; then
  echo "[$SECONDS s] dropout seeding A/B (benchmarks/runtime_overhead.py --seeding device all-backends)"
  python3 benchmarks/runtime_overhead.py --device cuda --model bert-tiny --set n_layer=32 hidden_dropout=0.1 \
    attn_dropout=0.1 --minibatch 4 --ubatch 2 --packs 8 --iters 20 --seeding device all-backends \
    > "$D/ab.txt" 2>&1 || echo "FAILED: $D/ab.txt"
fi
tail -4 "$D/ab.txt"
if [ ! -s "$D/gpu-test.txt" ]; then
  echo "[$SECONDS s] tests/test_runtime_gpu.py -k dropout"
  python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py -k dropout > "$D/gpu-test.txt" 2>&1 \
    || echo "FAILED: $D/gpu-test.txt"
fi
tail -3 "$D/gpu-test.txt"
