#!/usr/bin/env bash
# Device README item 38 (docs/performance.md entry 74): vDP at N = 4 summing its ranks' gradients in rank
# order (`harmony run --ordered-reduce`) against plain PyTorch in that order (`reference --shares 4
# --host-optimizer`, the `pytorch-hostopt-s4` curve). NCCL's all-reduce over four ranks associates the sum its
# own way, so the figures' vDP N = 4 curves are not bitwise `-s4`; with the flag they are predicted to be:
#   figure 13 (BERT-large, deterministic under the default kernels): 300 of 300 losses equal to the folder's
#     `-s4` (item 28's call writes it; run here when missing);
#   figure 21 (GPT-2 medium): with --deterministic too, 8 of 8 equal to a deterministic `-s4` run here.
# Each step is bounded by STEP_S seconds (default 280); a cut run still writes an `interrupted` record.
#   bash experiments/device/ordered-reduce-4gpu.sh results/paper/4xH200 OUT_DIR      (repository root)
# CPU smoke of the same steps, on a folder F with models/ and N = 4 vDP schedules of bert-tiny and gpt2-tiny
# (`harmony schedule results/smoke/cpu/profiles/M.json --model ... --calibration results/smoke/cpu/calibration.json
# -D 16 -N 4 --mode vDP --ubatch-fwd 4 --ubatch-bwd 4 --gpu-memory 2MiB -o F/schedules/M/vDP-N4.json`):
#   DEVICE=cpu CAP=2MiB MODEL13=bert-tiny PLAN13=vDP-N4 D13=16 U13=4 ITERS13=30 MODEL21=gpt2-tiny PLAN21=vDP-N4 \
#   D21=16 U21=4 ITERS21=5 bash THIS F /tmp/ord
set -u
F=${1:?usage: ordered-reduce-4gpu.sh RESULTS_FOLDER OUT_DIR}; OUT=${2:?usage: ordered-reduce-4gpu.sh RESULTS_FOLDER OUT_DIR}
mkdir -p "$OUT"; export PYTHONPATH=$PWD
DEVICE=${DEVICE:-cuda}; CAP=${CAP-11GiB}; STEP_S=${STEP_S:-280}
# on the CPU a matmul's rounding depends on its thread count: one intra-op thread everywhere (entry 73)
ONE_REF=; ONE_RUN=; [ "$DEVICE" = cpu ] && { ONE_REF="--threads 1"; ONE_RUN="--worker-threads 1"; }
MODEL13=${MODEL13:-bert-large-mrpc}; PLAN13=${PLAN13:-vDP-N4-D32-u8-8-p4}; D13=${D13:-32}; U13=${U13:-8}; ITERS13=${ITERS13:-300}
MODEL21=${MODEL21:-gpt2-medium-ft}; PLAN21=${PLAN21:-vDP-N4-D256-u2-2-p7}; D21=${D21:-256}; U21=${U21:-2}; ITERS21=${ITERS21:-8}
python3 -m harmony.cli env --device "$DEVICE" > "$OUT/env.json" 2>/dev/null
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
ref() {  # ref MODEL D U ITERS NAME [--deterministic]
  CUDA_VISIBLE_DEVICES=0 timeout "$STEP_S" python3 -m harmony.workflow reference "$F/models/$1.json" --data data \
    --device "$DEVICE$([ "$DEVICE" = cuda ] && echo :0)" --precision "$([ "$DEVICE" = cuda ] && echo tf32 || echo fp32)" \
    --minibatch "$2" --ubatch "$3" --shares 4 --host-optimizer $ONE_REF ${6:-} --iters "$4" -o "$OUT/$5.jsonl" > "$OUT/$5.log" 2>&1
}
run() {  # run MODEL PLAN ITERS NAME [--deterministic]
  timeout "$STEP_S" python3 -m harmony.cli run "$F/schedules/$1/$2.json" --iters "$3" --data data ${CAP:+--gpu-memory $CAP} \
    --precision "$([ "$DEVICE" = cuda ] && echo tf32 || echo fp32)" --device "$DEVICE" --ordered-reduce $ONE_RUN ${5:-} \
    -o "$OUT/$4.jsonl" > "$OUT/$4.log" 2>&1
}
S4=$F/convergence/figure13/$MODEL13/pytorch-hostopt-s4-N1.jsonl
echo "[$SECONDS s] figure 13: vDP N = 4 --ordered-reduce"; run "$MODEL13" "$PLAN13" "$ITERS13" fig13-vDP-N4-ordered
if [ ! -s "$S4" ]; then
  echo "[$SECONDS s] figure 13: -s4 (not in the folder)"; ref "$MODEL13" "$D13" "$U13" "$ITERS13" fig13-pytorch-hostopt-s4
  S4=$OUT/fig13-pytorch-hostopt-s4.jsonl
fi
echo "[$SECONDS s] figure 21: vDP N = 4 --ordered-reduce --deterministic"
run "$MODEL21" "$PLAN21" "$ITERS21" fig21-vDP-N4-ordered-det --deterministic
echo "[$SECONDS s] figure 21: -s4 --deterministic"; ref "$MODEL21" "$D21" "$U21" "$ITERS21" fig21-pytorch-hostopt-s4-det --deterministic
echo "[$SECONDS s] done"
python3 - "$OUT" "$S4" <<'PY'
import sys
from pathlib import Path
from harmony.jsonio import read_jsonl
out, s4 = Path(sys.argv[1]), Path(sys.argv[2])
def losses(p):
    return [r["loss"] for r in read_jsonl(p) if r.get("record") != "summary"] if p.exists() else None
for name, ref in (("fig13-vDP-N4-ordered", s4), ("fig21-vDP-N4-ordered-det", out / "fig21-pytorch-hostopt-s4-det.jsonl")):
    a, b = losses(out / f"{name}.jsonl"), losses(ref)
    if not a or not b:
        print(f"{name}: missing ({'run' if not a else 'reference'})"); continue
    gap = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    print(f"{name}: {sum(x == y for x, y in zip(a, b))} of {min(len(a), len(b))} losses equal to {ref.name}, largest gap {gap:.1e}")
PY
