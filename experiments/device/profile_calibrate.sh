#!/usr/bin/env bash
# Issue 3 acceptance on one GPU (H100): calibration, then bert96 / gpt2-xl / vgg416 / resnet1026 profiled
# under an 11 GiB cap, each with a 4-vLayer pack check (profiled vs measured peak memory), then a summary.
#   usage: experiments/device/profile_calibrate.sh OUTDIR        (run from the repository root)
#   env:   CAP (11GiB), PREC (tf32), BUDGET_S (450: the whole script stays under 8 min), PYTHON (python3),
#          DEVICE (cuda), MODELS ("gpt2-xl:1:5 bert96:1:5 resnet1026:1:5 vgg416:1:5": model:pack start:end)
#   CPU smoke test of this script: DEVICE=cpu MODELS="gpt2-tiny:1:5 vgg-tiny:1:5" CAP=none PREC=fp32 $0 /tmp/x
# Every step has its own timeout inside the overall budget; a failed step is reported and the rest go on.
set -uo pipefail
OUT=${1:?usage: $0 OUTDIR}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
CAP=${CAP:-11GiB}
PREC=${PREC:-tf32}
DEVICE=${DEVICE:-cuda}
MODELS=${MODELS:-gpt2-xl:1:5 bert96:1:5 resnet1026:1:5 vgg416:1:5}
DEADLINE=$((SECONDS + ${BUDGET_S:-450}))
H() { "$PY" -m harmony.cli "$@"; }
left() { local l=$((DEADLINE - SECONDS)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }

"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
H env --device "$DEVICE" --precision "$PREC" > "$OUT/env.json"

t=$SECONDS
timeout "$(left 90)" "$PY" -m harmony.cli calibrate --device "$DEVICE" --precision "$PREC" -o "$OUT/calibration.json" \
    2>&1 | tee "$OUT/calibrate.log"
echo "calibrate: rc=${PIPESTATUS[0]} $((SECONDS - t)) s" | tee -a "$OUT/steps.txt"

# model : 4-vLayer pack of identical blocks checked against a measured run
for spec in $MODELS; do
    m=${spec%%:*}; pack=${spec#*:}
    t=$SECONDS
    H decompose "$m" -o "$OUT/$m.model.json" 2>&1 | tee "$OUT/$m.log"
    tl=$(left 100)
    if [ "$tl" -le 5 ]; then echo "$m: skipped (budget spent)" | tee -a "$OUT/steps.txt"; continue; fi
    timeout "$tl" "$PY" -m harmony.cli profile "$OUT/$m.model.json" -o "$OUT/$m.profile.json" --device "$DEVICE" \
        --gpu-memory "$CAP" --precision "$PREC" --trials 5 --max-trial-s 0.25 --check-pack "$pack" \
        2>&1 | tee -a "$OUT/$m.log"
    echo "$m: rc=${PIPESTATUS[0]} $((SECONDS - t)) s (decompose + profile + pack check)" | tee -a "$OUT/steps.txt"
done

echo; echo "=== summary ($((SECONDS)) s in all) ==="
cat "$OUT/steps.txt"
"$PY" - "$OUT" $MODELS <<'PYEOF'
import json, os, sys
from collections import Counter
out = sys.argv[1]
ref = {"h2d_pinned_Bps": 55.0e9, "d2h_pinned_Bps": 55.1e9, "duplex_pinned_Bps": 90.7e9,
       "h2d_pageable_Bps": 7.9e9, "d2h_pageable_Bps": 10.8e9}
p = os.path.join(out, "calibration.json")
if os.path.exists(p):
    c = json.load(open(p))
    print(f"calibration ({c['gpu'] or c['device']}, {c['wall_s']:.0f} s): quantity, measured, hardware.md, ratio")
    for k, v in ref.items():
        print(f"  {k:<20} {c[k] / 1e9:7.1f} GB/s {v / 1e9:7.1f} GB/s  {c[k] / v:5.2f}")
    print("  matmul TFLOP/s " + ", ".join(f"{k} {v / 1e12:.0f}" for k, v in c["matmul_flops"].items())
          + f"; CPU adamw {c['cpu_adam_params_per_s'] / 1e9:.2f} G params/s ({c['cpu_threads']} threads)")
else:
    print("calibration: missing")
print(f"\n{'model':<11} {'wall s':>6} {'uniq':>4} {'u measured':<22} {'block':>5} {'u':>4} {'fwd ms':>8} {'bwd ms':>8}"
      f" {'bwd_peak MiB':>12}   pack check")
for m in [a.split(":")[0] for a in sys.argv[2:]]:
    p = os.path.join(out, f"{m}.profile.json")
    if not os.path.exists(p):
        print(f"{m:<11} (no profile)"); continue
    pr = json.load(open(p)); us = pr["ubatch_sizes"]
    blk = Counter(v["profiled_as"] for v in pr["vlayers"]).most_common(1)[0][0]
    v = pr["vlayers"][blk]
    mu = [u for u, ok in zip(us, v["measured"]) if ok]
    pc = pr.get("pack_check")
    pcs = (f"{pc['range'][0]}:{pc['range'][1]} u={pc['u']} pred {pc['predicted_bytes'] / 2**20:.0f} MiB meas "
           f"{pc['measured_bytes'] / 2**20:.0f} MiB err {pc['rel_error'] * 100:+.1f}% (act {pc['rel_error_activations'] * 100:+.1f}%)"
           if pc else "none")
    for j, u in enumerate((mu[0], mu[-1])):
        i = us.index(u)
        head = f"{m:<11} {pr['wall_s']:>6.0f} {pr['unique_vlayers']:>4} {str(mu):<22}" if j == 0 else " " * 46
        print(f"{head} {blk:>5} {u:>4} {v['fwd_s'][i] * 1e3:>8.2f} {v['bwd_s'][i] * 1e3:>8.2f} "
              f"{v['bwd_peak_bytes'][i] / 2**20:>12.0f}   {pcs if j == 0 else ''}")
PYEOF
