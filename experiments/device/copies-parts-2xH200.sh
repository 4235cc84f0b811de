#!/usr/bin/env bash
# docs/performance.md entry 99, call copies1: the runtime's GPU tests (the per-pack cases and vDP's one-copy
# gradients at N = 2 against plain PyTorch), then benchmarks/runtime_overhead.py --parts on one GPU with
# --weight-copies per-vlayer against per-pack: narrow resnet-tiny (32 blocks, packs of 8 and 32) and the
# paper's ResNet1026 at full width (u = 32, packs of 64: entry 97's vhost2 setting). Each step is bounded.
#   bash experiments/device/copies-parts-2xH200.sh OUTDIR        (GPU_TESTS_S=330)
# Writes OUTDIR/env.json, OUTDIR/gpu-tests.log, OUTDIR/<name>.{json,log}.
set -uo pipefail
O=${1:?usage: copies-parts-2xH200.sh OUTDIR}
mkdir -p "$O"
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}   # benchmarks/ imports harmony from the tree
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m harmony.cli env --device cuda --precision tf32 > "$O/env.json" 2> "$O/env.err"
timeout "${GPU_TESTS_S:-330}" python3 -m pytest -q -m gpu tests/test_runtime_gpu.py tests/test_benchmarks.py \
  > "$O/gpu-tests.log" 2>&1
echo "[$SECONDS s] GPU tests: $(tail -n 1 "$O/gpu-tests.log")"
step() {   # step NAME LIMIT_S benchmark-options...
  local name=$1 limit=$2; shift 2
  CUDA_VISIBLE_DEVICES=0 timeout "$limit" python3 benchmarks/runtime_overhead.py --device cuda --parts \
    --weight-copies per-vlayer per-pack --json "$O/$name.json" "$@" > "$O/$name.log" 2>&1 \
    || echo "[$SECONDS s] $name: FAILED (rc $?)"
  echo "[$SECONDS s] $name"; tail -n 4 "$O/$name.log"
}
step resnet-b32 100 --model resnet-tiny --blocks 32 --packs 8 32 --minibatch 4 --iters 15 --warmup 3
step resnet1026-u32 170 --model resnet1026 --blocks 128 --widths 64 128 256 512 --image-size 224 --packs 64 \
  --minibatch 32 --iters 5 --warmup 2
