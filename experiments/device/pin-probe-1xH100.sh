#!/usr/bin/env bash
# A short device call through grid_gpu.sh (the host's calibration and environment on record): the
# cudaHostRegister probe (experiments/device/pin_probe.py), then runtime_overhead.py --device cuda at 2, 8
# and 32 blocks per stage, one timed iteration each, to find what its failure at 32 depends on.
#   BUDGET_S=200 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/pin-probe-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 TAG
set -u
R=results/paper/1xH100-80GB-HBM3; D=$R/remeasure/swap-host
mkdir -p $D
python3 experiments/device/pin_probe.py > $D/pin-probe.txt 2>&1; cat $D/pin-probe.txt
for b in 2 8 32; do
  echo "=== --blocks $b"
  python3 benchmarks/runtime_overhead.py --device cuda --blocks $b --packs 1 --minibatch 8 --ubatch 8 --iters 1 --warmup 1 2>&1 | tail -4
done > $D/runtime-overhead-cuda-blocks.txt 2>&1
cat $D/runtime-overhead-cuda-blocks.txt
