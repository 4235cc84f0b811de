#!/usr/bin/env bash
# docs/performance.md entry 43: A/B of the runtime's own host work per task and per microbatch, on one GPU
# host, interleaved (a b b a: a drift of the host hits both alike). A is this tree; B is the same tree with
# PATCH applied (made on the CPU machine as the reverse of the change, so B is the runtime before it):
#   git diff -R <before> -- harmony > experiments/device/ab/host-overhead-before.patch
#   BUDGET_S=560 PATCH=experiments/device/ab/host-overhead-before.patch bash experiments/device/grid_gpu.sh \
#       experiments/device/host-overhead-ab-1xH100.sh results/paper/1xH100-80GB-HBM3 TAG
# Three measurements per tree and round, each under a time limit, none started past the call's deadline:
#   overhead  benchmarks/runtime_overhead.py --device cuda --parts (entry 40's narrow resnet-tiny, packs of
#             1 and 8 vLayers, one microbatch: the runtime's cost over plain PyTorch per vLayer, split by step)
#   swap-pp   swap-pp resnet1026 D = 64 u = 64 (1,030 one-vLayer tasks, host-bound: entry 40's gap)
#   harmony   Harmony's figure-10 resnet1026 D = 64 schedule (vPP, packs of 8-83 vLayers)
# GPU_TESTS=1 (default) runs tests/test_runtime_gpu.py first (about 100 s); ORDER ("a:1 b:1 b:2 a:2") lists
# tree:round, so a second call can add rounds ("b:3 a:3").
# Writes remeasure/host-overhead/{overhead,swap-pp,harmony}.{a,b}.<round>.* and prints the medians.
set -uo pipefail
R=results/paper/1xH100-80GB-HBM3
OUT=$R/remeasure/host-overhead
: "${PATCH:?PATCH=<a diff that turns this tree into the runtime before the change>}"
mkdir -p "$OUT"
. "$(dirname "${BASH_SOURCE[0]}")/ab_tree_lib.sh"
make_b_tree "$PATCH"
AB_OUT=$OUT AB_DEADLINE=${HARMONY_DEADLINE:-$(( $(date +%s) + 540 ))}

one() {   # one LABEL ROUND
  local l=$1 r=$2
  ab_step overhead "$l" "$r" 100 -- python3 benchmarks/runtime_overhead.py --device cuda --packs 1 8 --minibatch 8 \
    --ubatch 8 --weight-copies per-vlayer --parts --iters 10 --warmup 2
  ab_step swap-pp "$l" "$r" 100 -- python3 -m harmony.cli baseline swap-pp "$A/$R/models/resnet1026.json" --minibatch 64 \
    --gpus 1 --gpu-memory 11GiB --ubatch 64 --iters 4 --device cuda --precision tf32 \
    --profile "$A/$R/profiles/resnet1026.json" --calibration "$A/$R/calibration.json" -o "$A/$OUT/swap-pp.$l.$r.jsonl"
  ab_step harmony "$l" "$r" 100 -- python3 -m harmony.cli run "$A/$R/resnet1026-D64-N1/harmony.schedule.json" \
    --device cuda --iters 5 --warmup 1 --gpu-memory 11GiB --precision tf32 -o "$A/$OUT/harmony.$l.$r.jsonl"
}
if [ "${GPU_TESTS:-1}" = 1 ]; then     # the change's CUDA paths (stream switches) against plain PyTorch, first
  TAG=$(ls -t $R/calls/*.console.log | head -1 | xargs basename | sed 's/\.console\.log$//')   # this call's
  python3 -m pytest -q tests/test_runtime_gpu.py > "$R/calls/$TAG.gpu-tests.log" 2>&1
  echo "[$SECONDS s] GPU tests: $(tail -n 1 "$R/calls/$TAG.gpu-tests.log")"
fi
for x in ${ORDER:-a:1 b:1 b:2 a:2}; do one "${x%%:*}" "${x##*:}"; done

ab_summary "$OUT" swap-pp harmony
