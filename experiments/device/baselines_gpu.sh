#!/usr/bin/env bash
# The five baselines on GPT2-XL, D=64, 11 GiB cap, N=1, each at its best setting, on one GPU machine.
#
#   bash experiments/device/baselines_gpu.sh OUTDIR
#
# Writes OUTDIR/<system>.jsonl (the best setting; swap-dp/swap-pp also OUTDIR/<system>.u<u>.jsonl per
# searched microbatch size, listed under `ubatch_search` in the summary), OUTDIR/*.log, and prints a table
# last. Planned for about 8 minutes on an H100 (estimates from the user's anchor numbers in
# shared/reference/hardware.md: resident ~7 s/iter, fsdp-offload ~34 s/iter; swap runs start the runtime's
# 26 GB pinned host arena per candidate); every command has its own timeout so one slow system cannot take
# the others with it (limits add up to 580 s, inside one 600 s device call). Knobs (environment): PRECISION (tf32), CAP (11GiB), D (64), SWAP_UBATCH ("8,16"),
# RESIDENT_UBATCH (16), FSDP_UBATCH (8), ZERO_UBATCH (8), ITERS (3: warm-up, traced, timed), SWAP_ITERS (2).
#
# zero-offload needs DeepSpeed, which the GPU image lacks and cannot download: carry the wheels in
# .whl/deepspeed (see docs/baselines.md; `carry: [".whl"]`); without them the record says `unavailable`.
set -uo pipefail
OUT=${1:?usage: baselines_gpu.sh OUTDIR}
mkdir -p "$OUT"
MODEL=${MODEL:-gpt2-xl}
DEVICE=${DEVICE:-cuda}          # DEVICE=cpu MODEL=gpt2-tiny D=8 SWAP_UBATCH=2,4 ...: a CPU smoke run of this script
SYSTEMS=${SYSTEMS:-"resident fsdp-offload swap-dp swap-pp zero-offload"}   # a subset, to split it over calls
PRECISION=${PRECISION:-tf32}
CAP=${CAP:-11GiB}
D=${D:-64}
ITERS=${ITERS:-3}
SWAP_ITERS=${SWAP_ITERS:-2}
SWAP_UBATCH=${SWAP_UBATCH:-8,16}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
H="python3 -m harmony.cli"
if ! python3 -c "import harmony" 2>/dev/null; then export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"; fi

t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

stamp "decompose $MODEL"
$H decompose $MODEL -o "$OUT/$MODEL.model.json" 2>&1 | tail -1
M="$OUT/$MODEL.model.json"
COMMON=(--minibatch "$D" --gpus 1 --device "$DEVICE" --precision "$PRECISION")

run() {   # run NAME TIMEOUT_S ARGS...: one baseline, its log, never fatal
  local name=$1 limit=$2; shift 2
  case " $SYSTEMS " in *" $name "*) ;; *) return 0 ;; esac
  stamp "$name: harmony baseline $name $M ${COMMON[*]} $*"
  timeout "$limit" $H baseline "$name" "$M" "${COMMON[@]}" "$@" -o "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "  $name: stopped at its ${limit}s limit (no summary)"
  grep -E "^(resident|swap-dp|swap-pp|fsdp-offload|zero-offload)" "$OUT/$name.log" | tail -4
}

# 1. resident: no cap, the ceiling (the anchor's setting: microbatch 16, activation checkpointing)
run resident 100 --ubatch "${RESIDENT_UBATCH:-16}" --iters "$ITERS"
# 2. fsdp-offload: FSDP2 + CPUOffloadPolicy, capped
run fsdp-offload 150 --gpu-memory "$CAP" --ubatch "${FSDP_UBATCH:-8}" --iters "$ITERS"
# 3./4. the swap baselines on the Harmony runtime, microbatch search
run swap-dp 120 --gpu-memory "$CAP" --ubatch "$SWAP_UBATCH" --iters "$SWAP_ITERS"
run swap-pp 120 --gpu-memory "$CAP" --ubatch "$SWAP_UBATCH" --iters "$SWAP_ITERS"
# 5. zero-offload: DeepSpeed ZeRO-3 offload, if its wheels were carried
if ls .whl/deepspeed/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ds-site \
    .whl/deepspeed/*.whl && export PYTHONPATH="/tmp/ds-site:${PYTHONPATH:-}"
fi
run zero-offload 90 --gpu-memory "$CAP" --ubatch "${ZERO_UBATCH:-8}" --iters "$ITERS"

stamp "table"
python3 - "$OUT" <<'EOF'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = []
for name in ("resident", "fsdp-offload", "swap-dp", "swap-pp", "zero-offload"):
    p = out / f"{name}.jsonl"
    if not p.exists():
        rows.append((name, "no record", "", "", "", "", "", "")); continue
    s = json.loads(p.read_text().splitlines()[-1])
    gb = lambda x: f"{x / 1e9:.1f}" if isinstance(x, (int, float)) else "-"
    tr = s.get("memcpy_trace") or {}
    srch = ", ".join(f"u={c['ubatch']}:{c['status']}" + (f" {c['samples_per_s']:.2f}" if c.get("samples_per_s") else "")
                     for c in s.get("ubatch_search", []))
    peak = max(s.get("peak_allocated_bytes") or [0])
    rows.append((name, s["status"], s.get("ubatch") or s.get("ubatch_bwd"),
                 f"{s['samples_per_s']:.3f}" if s.get("samples_per_s") else "-",
                 f"{gb(s.get('bytes_h2d'))}/{gb(s.get('bytes_d2h'))}", f"{gb(tr.get('h2d'))}/{gb(tr.get('d2h'))}",
                 f"{peak / 2**30:.1f}" if peak else "-", (s.get("message") or srch or "")[:90]))
hdr = ("system", "status", "u", "samples/s", "h2d/d2h GB (counted)", "h2d/d2h GB (memcpy trace)", "peak GiB", "search / message")
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
for r in [hdr] + rows:
    print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)))
EOF
stamp "done"
