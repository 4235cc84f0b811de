#!/usr/bin/env bash
# docs/performance.md entry 75: A/B of the runtime's host work per task on one GPU, interleaved (a b b a: a
# drift of the host hits both alike). A is this tree; B is the same tree with PATCH applied (made on the CPU
# machine as the reverse of the change, so B is the runtime before it):
#   git diff -R <before> -- harmony > experiments/device/ab/host-work-before.patch
#   PATCH=experiments/device/ab/host-work-before.patch bash experiments/device/host-work-ab-1gpu.sh OUTDIR
# Per tree and round, each step under a time limit and none started past the call's deadline:
#   overhead  benchmarks/runtime_overhead.py --device cuda --parts: narrow resnet-tiny, packs of 1 and 8
#             vLayers, one microbatch (entry 40's benchmark: the runtime's cost over plain PyTorch per vLayer)
#   bert      the same for a 32-layer BERT with dropout, packs of 8, two microbatches
#   swap-pp   swap-pp resnet1026 D = 64 u = 64 (1,030 one-vLayer tasks, host-bound), the H100's model files
#   harmony   figure 10's bert96 D = 16 N = 1 vPP schedule (the H100's), 100 vLayers in 13 packs
# GPU_TESTS=1 (default) first runs the benchmarks' GPU tests and tests/test_runtime_gpu.py against plain
# PyTorch (bound: GPU_TESTS_S, 300); ORDER ("a:1 b:1 b:2 a:2") lists tree:round, so a second call can add rounds; HARMONY_DEADLINE
# (epoch seconds; default 540 s from the start). Writes OUTDIR/{overhead,bert,swap-pp,harmony}.{a,b}.<round>.*,
# OUTDIR/env.json, OUTDIR/gpu-tests.log, and prints the medians. Tar OUTDIR into $OUT (few files come back).
set -uo pipefail
O=${1:?usage: host-work-ab-1gpu.sh OUTDIR}
R=${R:-results/paper/1xH100-80GB-HBM3}
: "${PATCH:?PATCH=<a diff that turns this tree into the runtime before the change>}"
mkdir -p "$O"
O=$(cd "$O" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/ab_tree_lib.sh"
export PYTHONUNBUFFERED=1
make_b_tree "$PATCH"
AB_OUT=$O AB_DEADLINE=${HARMONY_DEADLINE:-$(( $(date +%s) + 540 ))}
python3 -m harmony.cli env --device cuda --precision tf32 > "$O/env.json" 2> "$O/env.err"

one() {   # one LABEL ROUND
  local l=$1 r=$2
  ab_step overhead "$l" "$r" 60 -- python3 benchmarks/runtime_overhead.py --device cuda --packs 1 8 --minibatch 8 \
    --ubatch 8 --parts --iters 10 --warmup 2
  ab_step bert "$l" "$r" 60 -- python3 benchmarks/runtime_overhead.py --device cuda --model bert-tiny \
    --set n_layer=32 hidden_dropout=0.1 attn_dropout=0.1 --minibatch 4 --ubatch 2 --packs 8 --parts --iters 20
  ab_step swap-pp "$l" "$r" 90 -- python3 -m harmony.cli baseline swap-pp "$A/$R/models/resnet1026.json" --minibatch 64 \
    --gpus 1 --gpu-memory 11GiB --ubatch 64 --iters 4 --device cuda --precision tf32 \
    --profile "$A/$R/profiles/resnet1026.json" --calibration "$A/$R/calibration.json" -o "$O/swap-pp.$l.$r.jsonl"
  ab_step harmony "$l" "$r" 90 -- python3 -m harmony.cli run "$A/$R/schedules/bert96/vPP-N1-D16-auto.json" \
    --device cuda --iters 6 --warmup 1 --gpu-memory 11GiB --precision tf32 -o "$O/harmony.$l.$r.jsonl"
}
if [ "${GPU_TESTS:-1}" = 1 ]; then     # the change's CUDA paths against plain PyTorch, first
  # about 120 s on one GPU, 240 s on two (their N = 2 cases run): a shorter bound interrupts a run mid-test
  timeout "${GPU_TESTS_S:-300}" python3 -m pytest -q -m gpu tests/test_benchmarks.py tests/test_runtime_gpu.py > "$O/gpu-tests.log" 2>&1
  echo "[$SECONDS s] GPU tests: $(tail -n 1 "$O/gpu-tests.log")"
fi
for x in ${ORDER:-a:1 b:1 b:2 a:2}; do one "${x%%:*}" "${x##*:}"; done

ab_summary "$O" swap-pp harmony
