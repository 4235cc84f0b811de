#!/usr/bin/env bash
# The five baselines on GPT2-XL, D=64, 11 GiB cap, N=1, each at its best setting, on one GPU machine.
#
#   bash experiments/device/baselines_gpu.sh OUTDIR
#
# Writes OUTDIR/<system>.jsonl (the best setting; searched systems also OUTDIR/search/<system>.u<u>.jsonl per
# searched microbatch size, listed under `ubatch_search` in the summary), OUTDIR/*.log, and prints a table
# last. Planned for about 8 minutes on an H100 (estimates from the user's anchor numbers in
# shared/reference/hardware.md: resident ~7 s/iter, fsdp-offload ~34 s/iter; swap runs start the runtime's
# 26 GB pinned host arena per candidate); every command has its own timeout so one slow system cannot take
# the others with it (limits add up to 580 s, inside one 600 s device call). Knobs (environment): PRECISION (tf32), CAP (11GiB; empty: no cap), MODEL_JSON (a model.json to use instead of
# decomposing MODEL), CALIBRATION (calibration.json: the roofline in each record), D (64), SWAP_UBATCH (4,8,16),
# RESIDENT_UBATCH (16), FSDP_UBATCH (4,8), ZERO_UBATCH (4,8), ITERS (3: warm-up, traced, timed), SWAP_ITERS (3: the
# same; the runtime traces iteration 1 of every swap run with torch.profiler and reports memcpy_trace next to
# its counters, memcpy_agrees = within 1%; with SWAP_ITERS=2 the trace is recorded as unavailable).
# The swap runs take about 2 minutes each with two microbatch candidates: with every system in one call
# the limits exceed 600 s, so split the systems over calls (SYSTEMS="swap-dp" ...), as the lead does.
# Best setting per system (microbatch search): SWAP_UBATCH (4,8,16), FSDP_UBATCH (4,8): every candidate runs as
# its own command with its own limit (SWAP_LIMIT_S 180, FSDP_LIMIT_S 300 per candidate; swap start-up is ~75 s
# of each candidate: workers, CUDA, the host arena (memfd) filled and cudaHostRegister'ed), into
# OUTDIR/search/<system>.u<u>.jsonl/.log; the fastest that ran becomes OUTDIR/<system>.jsonl with `ubatch_search`
# (a candidate stopped by its limit is listed as status "timeout"). zero-offload: ZERO_UBATCH (4,8: u=8 OOMs
# under 11 GiB), ZERO_LIMIT_S (300), its CPU Adam op built first as its own step (ZERO_BUILD_LIMIT_S 240,
# into TORCH_EXTENSIONS_DIR=${DS_EXT_DIR:-/tmp/ds-ext}; stale build locks of a killed build are removed).
# One system per device call: SYSTEMS=swap-dp (<= 9 min), swap-pp (<= 9), fsdp-offload (<= 9),
# zero-offload (<= 9), resident (~1).
#
# zero-offload needs DeepSpeed, which the GPU image lacks and cannot download: carry the wheels in
# .whl/deepspeed (see docs/baselines.md; `carry: [".whl"]`); without them the record says `unavailable`.
set -uo pipefail
OUT=${1:?usage: baselines_gpu.sh OUTDIR}
mkdir -p "$OUT"
MODEL=${MODEL:-gpt2-xl}
DEVICE=${DEVICE:-cuda}          # DEVICE=cpu MODEL=gpt2-tiny D=8 SWAP_UBATCH=2,4 ...: a CPU smoke run of this script
SYSTEMS=${SYSTEMS:-"harmony resident fsdp-offload swap-dp swap-pp zero-offload"}   # a subset, to split it over calls
PRECISION=${PRECISION:-tf32}
CAP=${CAP-11GiB}                # CAP= (empty): no cap, the real GPU (the `large` scale)
CAPARG=(); [ -n "$CAP" ] && CAPARG=(--gpu-memory "$CAP")
D=${D:-64}
ITERS=${ITERS:-3}
SWAP_ITERS=${SWAP_ITERS:-3}
SWAP_UBATCH=${SWAP_UBATCH:-4,8,16}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
H="python3 -m harmony.cli"
if ! python3 -c "import harmony" 2>/dev/null; then export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"; fi

t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

if [ -n "${MODEL_JSON:-}" ]; then     # a model.json made by the caller (e.g. an alias: zoo model + --set)
  M=$MODEL_JSON
else
  stamp "decompose $MODEL"
  $H decompose $MODEL -o "$OUT/$MODEL.model.json" 2>&1 | tail -1
  M="$OUT/$MODEL.model.json"
fi
COMMON=(--minibatch "$D" --gpus 1 --device "$DEVICE" --precision "$PRECISION")
# a calibration.json puts the physical roofline (DESIGN.md section 5) into every baseline record
[ -n "${CALIBRATION:-}" ] && COMMON+=(--calibration "$CALIBRATION")

run() {   # run NAME TIMEOUT_S ARGS...: one baseline, its log, never fatal (STEM=name.u4: other file names)
  local name=$1 limit=$2 stem=${STEM:-$1}; shift 2
  case " $SYSTEMS " in *" $name "*) ;; *) return 0 ;; esac
  stamp "$name: harmony baseline $name $M ${COMMON[*]} $* (limit ${limit}s)"
  timeout "$limit" $H baseline "$name" "$M" "${COMMON[@]}" "$@" -o "$OUT/$stem.jsonl" > "$OUT/$stem.log" 2>&1
  local rc=$?
  echo "$rc" > "$OUT/$stem.rc"
  [ $rc -eq 124 ] && echo "  $name: stopped at its ${limit}s limit (no summary)"
  # SIGKILLed (host OOM) before its summary: the baseline could not write one; record the failure
  if [ $rc -eq 137 ] && ! tail -n1 "$OUT/$stem.jsonl" 2>/dev/null | grep -q '"record": "summary"'; then
    echo "  $name: killed by SIGKILL (rc 137; the kernel's OOM killer when host memory runs out)"
    python3 experiments/device/record_killed.py --system "$name" --model-json "$M" --minibatch "$D" \
      ${U:+--ubatch "$U"} --log "$OUT/$stem.log" --env "collect:$DEVICE:$PRECISION" -o "$OUT/$stem.jsonl"
  fi
  grep -E "^(resident|swap-dp|swap-pp|fsdp-offload|zero-offload|\[zero-offload)" "$OUT/$stem.log" | tail -12
}

search() {   # search NAME LIMIT_PER_CANDIDATE U1,U2,... ARGS...: each microbatch its own command and limit
  local name=$1 limit=$2 list=$3; shift 3
  case " $SYSTEMS " in *" $name "*) ;; *) return 0 ;; esac
  mkdir -p "$OUT/search"    # candidates beside the best record would claim its grid point on import
  for u in ${list//,/ }; do STEM="search/$name.u$u" U=$u run "$name" "$limit" --ubatch "$u" "$@"; done
  python3 - "$OUT" "$name" "$list" "$limit" <<'EOF'
import json, shutil, sys, pathlib
out, name, us, limit = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(","), sys.argv[4]
found = []
for u in us:
    p = out / "search" / f"{name}.u{u}.jsonl"
    lines = p.read_text().splitlines() if p.exists() else []
    s = json.loads(lines[-1]) if lines and json.loads(lines[-1]).get("record") == "summary" else None
    rc = p.with_suffix(".rc").read_text().strip() if p.with_suffix(".rc").exists() else "?"
    found.append((int(u), p, s, rc))
gone = {"124": ("timeout", f"stopped at its {limit} s limit before its summary")}
search = [{"ubatch": u, "status": s["status"] if s else gone.get(rc, ("error",))[0], "iter_time_s": s and s.get("iter_time_s"),
           "samples_per_s": s and s.get("samples_per_s"), "bytes_h2d": s and s.get("bytes_h2d"),
           "bytes_d2h": s and s.get("bytes_d2h"),
           "message": s.get("message") if s else gone.get(rc, ("", f"exited with rc {rc} before its summary"))[1],
           "output": str(p)} for u, p, s, rc in found]
ok = [(u, p, s) for u, p, s, _ in found if s and s["status"] == "ok" and s.get("samples_per_s")]
pick = max(ok, key=lambda x: x[2]["samples_per_s"]) if ok else next(((u, p, s) for u, p, s, _ in found if s), None)
if pick:
    lines = pick[1].read_text().splitlines()
    summary = json.loads(lines[-1]); summary["ubatch_search"] = search
    (out / f"{name}.jsonl").write_text("\n".join(lines[:-1] + [json.dumps(summary)]) + "\n")
print(f"  {name}: microbatch search " + ", ".join(f"u={x['ubatch']}: {x['status']}" + (
      f" {x['samples_per_s']:.3f}" if x["samples_per_s"] else "") for x in search)
      + (f"; best u={pick[0]} -> {out / (name + '.jsonl')}" if ok else "; none ran"))
EOF
}

# 0. Harmony itself (searched vPP schedule from the committed H100 profile), for the ratios
case " $SYSTEMS " in *" harmony "*)
  P=${PROFILES:-results/paper/1xH100-80GB-HBM3/profiles}   # PROFILE, MODEL_JSON, CALIBRATION: files named directly
  PROF=${PROFILE:-$P/$MODEL.profile.json}
  stamp "harmony: schedule from $PROF, then harmony run (limit ${HARMONY_LIMIT_S:-200}s)"
  $H schedule "$PROF" --model "${MODEL_JSON:-$P/$MODEL.model.json}" --calibration "${CALIBRATION:-$P/calibration.json}" \
    --minibatch "$D" --gpus 1 --mode vPP "${CAPARG[@]}" --headroom "${HEADROOM:-0.03}" --compute-scale "${COMPUTE_SCALE:-1}" \
    -o "$OUT/harmony.schedule.json" --candidates "$OUT/harmony.search.csv" > "$OUT/harmony.log" 2>&1
  timeout "${HARMONY_LIMIT_S:-200}" $H run "$OUT/harmony.schedule.json" --device "$DEVICE" --iters "${HARMONY_ITERS:-5}" \
    --warmup 1 --memcpy-trace "${CAPARG[@]}" --precision "$PRECISION" -o "$OUT/harmony.jsonl" >> "$OUT/harmony.log" 2>&1
  tail -2 "$OUT/harmony.log" ;;
esac
# 1. resident: no cap, the ceiling (the anchor's setting: microbatch 16, activation checkpointing)
run resident 100 --ubatch "${RESIDENT_UBATCH:-16}" --iters "$ITERS"
# 2. fsdp-offload: FSDP2 + CPUOffloadPolicy, capped
search fsdp-offload "${FSDP_LIMIT_S:-300}" "${FSDP_UBATCH:-4,8}" "${CAPARG[@]}" --iters "$ITERS"
# 3./4. the swap baselines on the Harmony runtime, microbatch search
search swap-dp "${SWAP_LIMIT_S:-180}" "$SWAP_UBATCH" "${CAPARG[@]}" --iters "$SWAP_ITERS"
search swap-pp "${SWAP_LIMIT_S:-180}" "$SWAP_UBATCH" "${CAPARG[@]}" --iters "$SWAP_ITERS"
# 5. zero-offload: DeepSpeed ZeRO-3 offload, if its wheels were carried
if [[ " $SYSTEMS " == *" zero-offload "* ]] && ls .whl/deepspeed/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ds-site \
    .whl/deepspeed/*.whl && export PYTHONPATH="/tmp/ds-site:${PYTHONPATH:-}"
fi
case " $SYSTEMS " in *" zero-offload "*)
  export TORCH_EXTENSIONS_DIR=${DS_EXT_DIR:-/tmp/ds-ext}
  mkdir -p "$TORCH_EXTENSIONS_DIR" && find "$TORCH_EXTENSIONS_DIR" -name lock -delete   # a killed build's lock hangs the next
  stamp "zero-offload: build DeepSpeed's CPU Adam op (ninja $(command -v ninja || echo missing), c++ $(command -v c++ || echo missing), MAX_JOBS=${MAX_JOBS:=16})"
  export MAX_JOBS
  timeout "${ZERO_BUILD_LIMIT_S:-240}" python3 -c "from baselines.zero_offload import build_cpu_adam; print(build_cpu_adam())" \
    > "$OUT/zero-offload.build.log" 2>&1 || echo "  CPU Adam build failed or stopped (rc $?): tail of $OUT/zero-offload.build.log:"
  tail -3 "$OUT/zero-offload.build.log"
  stamp "zero-offload: CPU Adam op step done" ;;
esac
search zero-offload "${ZERO_LIMIT_S:-300}" "${ZERO_UBATCH:-4,8}" "${CAPARG[@]}" --iters "$ITERS"

stamp "table"
python3 - "$OUT" <<'EOF'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = []
h = out / "harmony.jsonl"
h_sps = json.loads(h.read_text().splitlines()[-1]).get("samples_per_s") if h.exists() else None
for name in ("harmony", "resident", "fsdp-offload", "swap-dp", "swap-pp", "zero-offload"):
    p = out / f"{name}.jsonl"
    if not p.exists():
        rows.append((name, "no record", "", "", "", "", "", "", "", "")); continue
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
    ratio = f"{h_sps / s['samples_per_s']:.2f}" if h_sps and s.get("samples_per_s") else "-"
    rows[-1] = rows[-1][:4] + (ratio,) + rows[-1][4:6] + (str(s.get("memcpy_agrees", "-")),) + rows[-1][6:]
hdr = ("system", "status", "u", "samples/s", "harmony/x", "h2d/d2h GB (counted)", "h2d/d2h GB (memcpy trace)",
       "trace agrees", "peak GiB", "search / message")
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
for r in [hdr] + rows:
    print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)))
EOF
stamp "done"
