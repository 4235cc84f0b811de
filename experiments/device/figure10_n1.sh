#!/usr/bin/env bash
# Figure-10 configurations on one GPU (N=1, 11 GiB cap, TF32), Harmony beside the swapping baselines,
# each model in one go: (re-)profile if asked, schedule (searched), harmony run, then the baselines.
#   usage: experiments/device/figure10_n1.sh OUTDIR      (from the repository root, on the GPU machine)
#   env:   MODELS ("bert96 vgg416 resnet1026"), D (64), SYSTEMS ("harmony swap-dp fsdp-offload"),
#          REPROFILE (models to profile again here, e.g. "vgg416"), PROFILES (committed profile folder),
#          HEADROOM (0.03, see harmony schedule --headroom), ITERS (4), SWAP_UBATCH (model-specific default below), FSDP_UBATCH, BUDGET_S (560), CAP, PREC
# Every step has its own timeout inside the overall budget; a step that fails leaves its log and the
# next one runs. Writes OUTDIR/<model>-D<D>-N1/<system>.jsonl (+ .log) and prints a table last.
set -uo pipefail
OUT=${1:?usage: $0 OUTDIR}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
MODELS=${MODELS:-bert96 vgg416 resnet1026}
D=${D:-64}
SYSTEMS=${SYSTEMS:-harmony swap-dp fsdp-offload}
PROFILES=${PROFILES:-results/paper/1xH100-80GB-HBM3/profiles}
REPROFILE=${REPROFILE:-}
CAP=${CAP:-11GiB}; PREC=${PREC:-tf32}; ITERS=${ITERS:-4}
DEADLINE=$((SECONDS + ${BUDGET_S:-560}))
H() { "$PY" -m harmony.cli "$@"; }
left() { local l=$((DEADLINE - SECONDS)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
log() { echo "[$SECONDS s] $*" | tee -a "$OUT/steps.txt"; }
# microbatch of the baselines per model (the largest that the profile says fits at 11 GiB per vLayer)
swap_u() { case $1 in bert96) echo 16;; vgg416) echo 16;; resnet1026) echo 32;; *) echo 8;; esac; }

H env --device cuda --precision "$PREC" > "$OUT/env.json"
for m in $MODELS; do
    dir="$OUT/$m-D$D-N1"; mkdir -p "$dir"
    prof="$PROFILES/$m.profile.json"; model="$PROFILES/$m.model.json"; cal="$PROFILES/calibration.json"
    if [[ " $REPROFILE " == *" $m "* ]]; then
        log "$m: profile again"
        H decompose "$m" -o "$dir/model.json" > "$dir/profile.log" 2>&1
        timeout "$(left 120)" "$PY" -m harmony.cli profile "$dir/model.json" -o "$dir/profile.json" --device cuda \
            --gpu-memory "$CAP" --precision "$PREC" --trials 5 --max-trial-s 0.25 >> "$dir/profile.log" 2>&1
        log "$m: profile rc=$?"
        [ -f "$dir/profile.json" ] && prof="$dir/profile.json" && model="$dir/model.json"
    fi
    for sys in $SYSTEMS; do
        t=$(left 240); if [ "$t" -le 20 ]; then log "$m $sys: skipped (budget spent)"; continue; fi
        log "$m $sys: start (limit $t s)"
        case $sys in
        harmony)
            H schedule "$prof" --model "$model" --calibration "$cal" --minibatch "$D" --gpus 1 --mode vPP \
                --gpu-memory "$CAP" --headroom "${HEADROOM:-0.03}" -o "$dir/harmony.schedule.json" \
                --candidates "$dir/harmony.search.csv" \
                > "$dir/harmony.log" 2>&1
            timeout "$t" "$PY" -m harmony.cli run "$dir/harmony.schedule.json" --device cuda --iters "$ITERS" \
                --warmup 1 --memcpy-trace --gpu-memory "$CAP" --precision "$PREC" -o "$dir/harmony.jsonl" >> "$dir/harmony.log" 2>&1 ;;
        swap-dp|swap-pp)
            timeout "$t" "$PY" -m harmony.cli baseline "$sys" "$model" --minibatch "$D" --gpus 1 --device cuda \
                --precision "$PREC" --gpu-memory "$CAP" --ubatch "${SWAP_UBATCH:-$(swap_u "$m")}" --iters 3 \
                --profile "$prof" -o "$dir/$sys.jsonl" > "$dir/$sys.log" 2>&1 ;;
        fsdp-offload|zero-offload)
            timeout "$t" "$PY" -m harmony.cli baseline "$sys" "$model" --minibatch "$D" --gpus 1 --device cuda \
                --precision "$PREC" --gpu-memory "$CAP" --ubatch "${FSDP_UBATCH:-$(swap_u "$m")}" --iters 3 \
                -o "$dir/$sys.jsonl" > "$dir/$sys.log" 2>&1 ;;
        esac
        log "$m $sys: rc=$?"
    done
done

echo "=== summary ($SECONDS s) ==="
"$PY" - "$OUT" <<'PYEOF'
import glob, json, os, sys
print(f"{'model':<11} {'system':<13} {'status':<8} {'u':>4} {'samples/s':>9} {'s/iter':>7} {'pred s':>7} "
      f"{'H2D GB':>7} {'D2H GB':>7} {'peak GiB':>8}")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*-D*-N1", "*.jsonl"))):
    recs = [json.loads(l) for l in open(f) if l.strip()]
    s = next((r for r in reversed(recs) if r.get("record") == "summary"), None)
    if s is None:
        print(f"{f}: no summary"); continue
    g = lambda k: s.get(k)
    fmt = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
    u = g("ubatch") or g("ubatch_bwd") or (g("config") or {}).get("ubatch_bwd")
    peak = max(g("peak_allocated_bytes") or [0]) / 2**30
    print(f"{g('model'):<11} {g('system'):<13} {g('status'):<8} {str(u or '-'):>4} {fmt(g('samples_per_s'))} "
          f"{fmt(g('iter_time_s'), 3):>7} {fmt(g('predicted_iter_time_s'), 3):>7} "
          f"{fmt((g('bytes_h2d') or 0) / 1e9, 1):>7} {fmt((g('bytes_d2h') or 0) / 1e9, 1):>7} {peak:8.2f}")
PYEOF
