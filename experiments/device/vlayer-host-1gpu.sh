#!/usr/bin/env bash
# docs/performance.md entry 97: the runtime's host work per vLayer against the tensors a vLayer holds, on one
# GPU. benchmarks/runtime_overhead.py --device cuda --parts --json, one narrow model family per tensor count
# (their GPU work is tiny, so runtime and plain PyTorch are both host-bound and their difference is the
# runtime's host work): vgg-tiny (2 tensors a vLayer: a conv's weight and bias), resnet-tiny (12: a BasicBlock's
# two convs and two BatchNorms with their buffers, as ResNet1026's blocks), gpt2-tiny (12), bert-tiny (16).
# Two depths of each of the first three (so a per-vLayer cost is told from a per-iteration one), packs of 1, 8
# and 32 vLayers (per task from per vLayer), one microbatch; then resnet and vgg with four microbatches of 1
# (per microbatch from per task). Each step is bounded; none starts past the deadline.
#   bash experiments/device/vlayer-host-1gpu.sh OUTDIR     (CUDA_VISIBLE_DEVICES=0 on a 2x host)
#   SET=real bash experiments/device/vlayer-host-1gpu.sh OUTDIR    the paper's ResNet1026 and VGG416 instead
# Writes OUTDIR/<name>.json (rows, per-part medians, environment), OUTDIR/<name>.log, OUTDIR/env.json,
# OUTDIR/gpu-tests.log. Fit offline: PYTHONPATH=. python experiments/fit_vlayer_host.py OUTDIR
set -uo pipefail
O=${1:?usage: vlayer-host-1gpu.sh OUTDIR}
mkdir -p "$O"
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}   # benchmarks/ imports harmony from the tree
DEADLINE=${HARMONY_DEADLINE:-$(( $(date +%s) + 500 ))}
python3 -m harmony.cli env --device cuda --precision fp32 > "$O/env.json" 2> "$O/env.err"
timeout 120 python3 -m pytest -q -m gpu tests/test_benchmarks.py > "$O/gpu-tests.log" 2>&1
echo "[$SECONDS s] GPU tests: $(tail -n 1 "$O/gpu-tests.log")"

step() {   # step NAME benchmark-options...
  local name=$1; shift
  if [ "$(date +%s)" -ge "$DEADLINE" ]; then echo "[$SECONDS s] $name: skipped (deadline)"; return; fi
  timeout 150 python3 benchmarks/runtime_overhead.py --device cuda --parts --iters 15 --warmup 3 \
    --json "$O/$name.json" "$@" > "$O/$name.log" 2>&1 || echo "[$SECONDS s] $name: FAILED (rc $?)"
  echo "[$SECONDS s] $name"; tail -n 5 "$O/$name.log"
}
if [ "${SET:-tiny}" = real ]; then
  # the paper's ResNet1026 and VGG416 at full width: whether the per-vLayer parts (prefetch, install,
  # release, grads to the arena) cost on the host what the narrow models' do, at a host-bound u = 4 and at
  # the u = 32 of figure 10's ResNet1026 vDP D = 64 plan on 2x H200
  R=(--model resnet1026 --blocks 128 --widths 64 128 256 512 --image-size 224 --iters 5 --warmup 2)
  step resnet1026-u4 "${R[@]}" --packs 64 256 --minibatch 4
  step resnet1026-u32 "${R[@]}" --packs 64 256 --minibatch 32
  step vgg416-u4 --model vgg416 --packs 32 128 --minibatch 4 --iters 5 --warmup 2
  exit 0
fi
P=(--packs 1 8 32 --minibatch 4)
step vgg-e24 --model vgg-tiny --set extra_convs=24 "${P[@]}"
step resnet-b32 --model resnet-tiny --blocks 32 "${P[@]}"
step gpt2-l128 --model gpt2-tiny --set n_layer=128 "${P[@]}"
step bert-l96 --model bert-tiny --set n_layer=96 "${P[@]}"
step vgg-e12 --model vgg-tiny --set extra_convs=12 "${P[@]}"
step resnet-b16 --model resnet-tiny --blocks 16 "${P[@]}"
step gpt2-l64 --model gpt2-tiny --set n_layer=64 "${P[@]}"
step vgg-e24-u1 --model vgg-tiny --set extra_convs=24 "${P[@]}" --ubatch 1
step resnet-b32-u1 --model resnet-tiny --blocks 32 "${P[@]}" --ubatch 1
