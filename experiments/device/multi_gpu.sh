#!/usr/bin/env bash
# Harmony on N GPUs of one host: the runtime's GPU correctness test (N = 1, 2 and, with 4 GPUs, 4), a calibration of this
# box (H2D, D2H and the GPU-GPU matrix), then MODEL at D, 11 GiB cap, searched vPP and vDP schedules
# (compute costs from the committed H100 profile; bandwidths from this box), and swap-dp at N beside them.
#   usage: experiments/device/multi_gpu.sh OUTDIR        (from the repository root, on the GPU machine)
#   env:   N (all GPUs present), MODEL (gpt2-xl), D (64), STEPS ("test calibrate vPP vDP swap-dp"),
#          PROFILES (results/paper/1xH100-80GB-HBM3/profiles), CAP (11GiB), PREC (tf32), ITERS (4: warm-up,
#          memcpy-traced, 2 timed), SWAP_UBATCH (8), BUDGET_S (500)
# Writes OUTDIR/<MODEL>-D<D>-N<N>/{harmony-vPP,harmony-vDP,swap-dp}.{schedule.json,jsonl,log}, env.json,
# topo.txt, calibration.json, gpu_test.log and a table (measured vs predicted) last.
set -uo pipefail
OUT=${1:?usage: $0 OUTDIR}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING=false
PY=${PYTHON:-python3}
N=${N:-$("$PY" -c 'import torch; print(torch.cuda.device_count())')}
MODEL=${MODEL:-gpt2-xl}; D=${D:-64}; CAP=${CAP:-11GiB}; PREC=${PREC:-tf32}; ITERS=${ITERS:-4}
STEPS=${STEPS:-test calibrate vPP vDP swap-dp}
PROFILES=${PROFILES:-results/paper/1xH100-80GB-HBM3/profiles}
DEADLINE=$((SECONDS + ${BUDGET_S:-500}))
H() { "$PY" -m harmony.cli "$@"; }
left() { local l=$((DEADLINE - SECONDS)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
log() { echo "[$SECONDS s] $*" | tee -a "$OUT/steps.txt"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

H env --device cuda --precision "$PREC" > "$OUT/env.json"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv > "$OUT/gpus.txt" 2>&1
if has test; then
    log "GPU correctness test (N = 1, 2, 4 as present)"
    timeout "$(left 150)" "$PY" -m pytest -q -s -p no:cacheprovider tests/test_runtime_gpu.py > "$OUT/gpu_test.log" 2>&1
    log "GPU correctness test rc=$? ($(tail -1 "$OUT/gpu_test.log"))"
fi
CAL="$PROFILES/calibration.json"
if has calibrate; then
    log "calibrate this box"
    timeout "$(left 60)" "$PY" -m harmony.cli calibrate --device cuda --precision "$PREC" -o "$OUT/calibration.json" \
        > "$OUT/calibrate.log" 2>&1 && CAL="$OUT/calibration.json"
    log "calibrate rc=$? -> $CAL"
fi
dir="$OUT/$MODEL-D$D-N$N"; mkdir -p "$dir"
prof="$PROFILES/$MODEL.profile.json"; model="$PROFILES/$MODEL.model.json"
for mode in vPP vDP; do
    has "$mode" || continue
    t=$(left 200); if [ "$t" -le 30 ]; then log "harmony-$mode: skipped (budget spent)"; continue; fi
    log "harmony-$mode N=$N: schedule + run (limit $t s)"
    H schedule "$prof" --model "$model" --calibration "$CAL" --minibatch "$D" --gpus "$N" --mode "$mode" \
        --gpu-memory "$CAP" --headroom "${HEADROOM:-0.03}" -o "$dir/harmony-$mode.schedule.json" \
        --candidates "$dir/harmony-$mode.search.csv" > "$dir/harmony-$mode.log" 2>&1
    timeout "$t" "$PY" -m harmony.cli run "$dir/harmony-$mode.schedule.json" --device cuda --iters "$ITERS" --warmup 1 \
        --memcpy-trace --gpu-memory "$CAP" --precision "$PREC" -o "$dir/harmony-$mode.jsonl" >> "$dir/harmony-$mode.log" 2>&1
    log "harmony-$mode rc=$?: $(grep -E 'samples/s|error|oom' "$dir/harmony-$mode.log" | tail -1)"
done
if has swap-dp; then
    t=$(left 180)
    if [ "$t" -le 30 ]; then log "swap-dp: skipped (budget spent)"; else
        log "swap-dp N=$N u=${SWAP_UBATCH:-8} (limit $t s)"
        timeout "$t" "$PY" -m harmony.cli baseline swap-dp "$model" --minibatch "$D" --gpus "$N" --device cuda \
            --precision "$PREC" --gpu-memory "$CAP" --ubatch "${SWAP_UBATCH:-8}" --iters 3 --profile "$prof" \
            --calibration "$CAL" -o "$dir/swap-dp.jsonl" > "$dir/swap-dp.log" 2>&1
        log "swap-dp rc=$?: $(grep -E 'samples/s|error|oom' "$dir/swap-dp.log" | tail -1)"
    fi
fi

echo "=== summary ($SECONDS s) ==="
"$PY" - "$dir" <<'PYEOF'
import glob, json, os, sys
print(f"{'system':<12} {'status':<8} {'samples/s':>9} {'s/iter':>7} {'pred s':>7} {'meas/pred':>9} "
      f"{'H2D GB':>7} {'D2H GB':>7} {'P2P GB':>7} {'trace ok':>8} {'idle%':>6}")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
    recs = [json.loads(l) for l in open(f) if l.strip()]
    s = next((r for r in reversed(recs) if r.get("record") == "summary"), None)
    if s is None:
        print(f"{os.path.basename(f)}: no summary"); continue
    t, p = s.get("iter_time_s"), s.get("predicted_iter_time_s")
    by = s.get("bytes_by_kind") or {}
    tl = [x for x in ((s.get("memcpy_trace") or {}).get("timelines") or []) if x]
    idle = ", ".join(f"{100 * x.get('compute_idle_fraction', 0):.0f}" for x in tl) or "-"
    fmt = lambda v, n=2: "-" if v is None else f"{v:.{n}f}"
    print(f"{os.path.basename(f)[:-6]:<12} {s.get('status'):<8} {fmt(s.get('samples_per_s')):>9} {fmt(t, 3):>7} "
          f"{fmt(p, 3):>7} {fmt(t / p if t and p else None):>9} {fmt((s.get('bytes_h2d') or 0) / 1e9, 1):>7} "
          f"{fmt((s.get('bytes_d2h') or 0) / 1e9, 1):>7} {fmt(by.get('p2p', 0) / 1e9, 1):>7} "
          f"{str(s.get('memcpy_agrees')):>8} {idle:>6}")
PYEOF
