#!/usr/bin/env bash
# One short device call (about 3 minutes), through grid_gpu.sh so the host's calibration (with its
# host_issue_s_per_call probe) and environment go on record beside it: the runtime's and the benchmarks'
# GPU tests, then entry 40's split of the runtime's per-task and per-microbatch host cost on the GPU host
# (benchmarks/runtime_overhead.py --device cuda; docs/performance.md entry 40).
#   BUDGET_S=300 bash experiments/device/grid_gpu.sh experiments/device/tests-overhead-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 TAG
set -u
R=results/paper/1xH100-80GB-HBM3
TAG=$(ls -t $R/calls/*.console.log | head -1 | xargs basename | sed 's/\.console\.log$//')   # this call's
python3 -m pytest -q tests/test_benchmarks.py tests/test_runtime_gpu.py > "$R/calls/$TAG.gpu-tests.log" 2>&1
echo "[$SECONDS s] GPU tests: $(tail -1 "$R/calls/$TAG.gpu-tests.log")"
mkdir -p $R/remeasure/swap-host
for u in 8 2; do
  python3 benchmarks/runtime_overhead.py --device cuda --packs 1 8 --minibatch 8 --ubatch $u --iters 10 --warmup 2
done > $R/remeasure/swap-host/runtime-overhead-cuda.txt 2>&1
echo "[$SECONDS s] runtime_overhead: $(wc -l < $R/remeasure/swap-host/runtime-overhead-cuda.txt) lines"
tail -20 $R/remeasure/swap-host/runtime-overhead-cuda.txt
