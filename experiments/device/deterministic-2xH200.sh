#!/usr/bin/env bash
# Device README item 36 (docs/performance.md entry 71): figure 21 (GPT-2 medium, D = 256, 20 iterations) with
# deterministic kernels on two GPUs. Plain PyTorch in Harmony's order (`reference --shares K --host-optimizer
# --deterministic`, -s1 twice: run to run) and Harmony's three modes (`harmony run --deterministic`) on the
# folder's committed schedules. Predicted: the two -s1 runs equal; every Harmony curve equal to its own-order
# reference at all 20 iterations (figure 13's BERT already is without the flag); the cost of the
# deterministic kernels in s/iteration against the folder's records below 10%.
# Measured (fiftieth session, entry 72): all equal, at 1.9-2.1x the records' s/iteration (the references'
# pair took 287 s at 20 iterations; a whole run of the script does not fit one 600 s call, so pass ITERS=8
# and STEP_S, which bounds each step with `timeout`; a run cut that way still writes an `interrupted` record).
#   bash experiments/device/deterministic-2xH200.sh OUT_DIR     (repository root; PYTHONPATH=. is set here)
# The CPU smoke of the same steps (the smoke folder's figure 21, after `snakemake figure21`):
#   DEVICE=cpu F=results/smoke/cpu MODEL=gpt2-tiny D=16 U=4 PLAN=D16-u4-4-p2 ITERS=3 CAP= bash THIS /tmp/det
set -u
OUT=${1:?usage: deterministic-2xH200.sh OUT_DIR}
mkdir -p "$OUT"
export PYTHONPATH=$PWD
F=${F:-results/paper/2xH200}; MODEL=${MODEL:-gpt2-medium-ft}; D=${D:-256}; U=${U:-2}; PLAN=${PLAN:-D256-u2-2-p7}
ITERS=${ITERS:-20}; DEVICE=${DEVICE:-cuda}; CAP=${CAP-11GiB}
BOUND=${STEP_S:+timeout $STEP_S}
M=$F/models/$MODEL.json
S=$F/schedules/$MODEL
python3 -m harmony.cli env --device "$DEVICE" > "$OUT/env.json" 2>/dev/null
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
ref() {  # ref GPU SHARES TAG
  CUDA_VISIBLE_DEVICES=$1 OMP_NUM_THREADS=$(( $(nproc) / 2 )) $BOUND python3 -m harmony.workflow reference "$M" --data data \
    --device "$DEVICE$([ "$DEVICE" = cuda ] && echo :0)" --precision tf32 --minibatch "$D" --ubatch "$U" --shares "$2" \
    --host-optimizer --deterministic --iters "$ITERS" -o "$OUT/pytorch-hostopt-s$2-$3.jsonl" > "$OUT/pytorch-hostopt-s$2-$3.log" 2>&1
}
run() {  # run SCHEDULE NAME [CUDA_VISIBLE_DEVICES]
  CUDA_VISIBLE_DEVICES=${3:-0,1} $BOUND python3 -m harmony.cli run "$S/$1" --iters "$ITERS" --data data \
    ${CAP:+--gpu-memory $CAP} --precision tf32 --device "$DEVICE" --deterministic -o "$OUT/$2.jsonl" > "$OUT/$2.log" 2>&1
}
echo "[$SECONDS s] -s1 and -s2 side by side"; ref 0 1 a & ref 1 2 a & wait
echo "[$SECONDS s] vDP N = 1 beside -s1 again"; run vDP-N1-$PLAN.json harmony-vDP-N1 0 & ref 1 1 b & wait
echo "[$SECONDS s] vDP N = 2"; run vDP-N2-$PLAN.json harmony-vDP-N2
echo "[$SECONDS s] vPP N = 2"; run vPP-N2-$PLAN.json harmony-vPP-N2
echo "[$SECONDS s] done"
python3 - "$OUT" "$F/convergence/figure21/$MODEL" <<'EOF'
import sys
from pathlib import Path
from harmony.jsonio import read_jsonl
out, old = Path(sys.argv[1]), Path(sys.argv[2])
def curve(p):
    if not p.exists():
        return None, None
    recs = read_jsonl(p)
    return [r["loss"] for r in recs if r.get("record") != "summary"], recs[-1]
ref = {k: curve(out / f"pytorch-hostopt-s{k}-a.jsonl")[0] for k in (1, 2)}
again = curve(out / "pytorch-hostopt-s1-b.jsonl")[0]
print("-s1 run to run:", "equal" if ref[1] and again == ref[1] else f"NOT equal ({again is not None})")
for name, k in (("harmony-vDP-N1", 1), ("harmony-vDP-N2", 2), ("harmony-vPP-N2", 1)):
    losses, summ = curve(out / f"{name}.jsonl")
    if not losses or not ref[k]:
        print(name, "missing"); continue
    gap = max(abs(a - b) / abs(b) for a, b in zip(losses, ref[k]))
    _, before = curve(old / f"{name}.jsonl")
    cost = summ["iter_time_s"] / before["iter_time_s"] if before else float("nan")
    print(f"{name}: {sum(a == b for a, b in zip(losses, ref[k]))} of {len(losses)} losses equal to -s{k}, "
          f"largest gap {gap:.1e}; {summ['iter_time_s']:.3f} s/iteration, {cost:.3f}x the folder's record")
EOF
