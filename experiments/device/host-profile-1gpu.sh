#!/usr/bin/env bash
# Where the runtime's host time goes on a GPU host today (docs/performance.md entry 75): the narrow
# benchmark's per-step split and a cProfile of its CUDA path, the same for a BERT-shaped chain with dropout,
# and figure 10's bert96 D = 16 N = 1 plans (the H100's committed schedules, the host-bound model of entries
# 41, 60 and 61) run on this GPU with their host phases. One GPU; about 5 minutes; every step time-bound.
#   bash experiments/device/host-profile-1gpu.sh OUTDIR
# Writes OUTDIR/env.json, nvsmi.txt and one .log (and .jsonl for the runs) per step; RUNS=0 leaves out the
# two bert96 runs. The device tool brings back only a few files from $OUT: tar OUTDIR there.
set -uo pipefail
O=${1:?usage: host-profile-1gpu.sh OUTDIR}
mkdir -p "$O"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}   # benchmarks/ import harmony from the tree
R=results/paper/1xH100-80GB-HBM3
python3 -m harmony.cli env --device cuda --precision tf32 > "$O/env.json" 2> "$O/env.err"
nvidia-smi > "$O/nvsmi.txt" 2>&1

step() {   # step NAME LIMIT_S -- command...
  local name=$1 limit=$2; shift 3
  timeout "$limit" "$@" > "$O/$name.log" 2>&1
  echo "[$SECONDS s] $name: rc=$? $(grep -v Warning "$O/$name.log" | tail -1 | cut -c1-160)"
}

step resnet-parts 90 -- python3 benchmarks/runtime_overhead.py --device cuda --packs 1 8 --minibatch 8 --ubatch 8 \
  --parts --iters 10 --warmup 2
step resnet-cprofile 90 -- python3 benchmarks/runtime_overhead.py --device cuda --packs 1 --minibatch 8 --ubatch 8 \
  --profile --top 70 --iters 10 --warmup 2
step bert-parts 120 -- python3 benchmarks/runtime_overhead.py --device cuda --model bert-tiny \
  --set n_layer=32 hidden_dropout=0.1 attn_dropout=0.1 --minibatch 4 --ubatch 2 --packs 8 --parts --iters 20
step bert-cprofile 120 -- python3 benchmarks/runtime_overhead.py --device cuda --model bert-tiny \
  --set n_layer=32 hidden_dropout=0.1 attn_dropout=0.1 --minibatch 4 --ubatch 2 --packs 8 --profile --top 70 --iters 10
[ "${RUNS:-1}" = 1 ] && for mode in vPP vDP; do
  step "bert96-D16-$mode" 120 -- python3 -m harmony.cli run "$R/schedules/bert96/$mode-N1-D16-auto.json" --device cuda \
    --iters 6 --warmup 1 --gpu-memory 11GiB --precision tf32 -o "$O/bert96-D16-$mode.jsonl"
done
