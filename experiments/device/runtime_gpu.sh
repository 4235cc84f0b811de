#!/usr/bin/env bash
# Issue 5 acceptance on the GPU machine: (1) the runtime's correctness test on CUDA (one tiny model per
# family, vPP and vDP, N=1, and N=2 when two GPUs are present); (2) GPT2-XL, D=64, 11 GiB cap, N=1,
# searched schedule: run it and compare bytes, time and bound with the simulator's prediction.
#   usage: experiments/device/runtime_gpu.sh OUTDIR          (run from the repository root)
#   env:   STEPS ("test gpt2xl"), CAP (11GiB), PREC (tf32), ITERS (4: warm-up, memcpy-traced, 2 timed),
#          WARMUP (1), MODEL (gpt2-xl), D (64),
#          PROFILE (an existing profile.json of MODEL: skips profiling), CALIBRATION (calibration.json;
#          default: measured here), BUDGET_S (540), PYTHON (python3)
# A step that fails is reported and the next one runs; everything lands in OUTDIR.
set -uo pipefail
OUT=${1:?usage: $0 OUTDIR}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
STEPS=${STEPS:-test gpt2xl}
CAP=${CAP:-11GiB}; PREC=${PREC:-tf32}; ITERS=${ITERS:-4}; WARMUP=${WARMUP:-1}; MODEL=${MODEL:-gpt2-xl}; D=${D:-64}
DEADLINE=$((SECONDS + ${BUDGET_S:-540}))
H() { "$PY" -m harmony.cli "$@"; }
left() { local l=$((DEADLINE - SECONDS)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
step() { echo "$1: rc=$2 $3 s" | tee -a "$OUT/steps.txt"; }

"$PY" -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0))' | tee "$OUT/device.txt"
H env --device cuda --precision "$PREC" > "$OUT/env.json"

if [[ " $STEPS " == *" test "* ]]; then
    t=$SECONDS
    timeout "$(left 240)" "$PY" -m pytest -q -s -p no:cacheprovider tests/test_runtime_gpu.py 2>&1 | tee "$OUT/gpu_test.log"
    step "gpu correctness test" "${PIPESTATUS[0]}" $((SECONDS - t))
fi

if [[ " $STEPS " == *" gpt2xl "* ]]; then
    t=$SECONDS
    H decompose "$MODEL" -o "$OUT/$MODEL.model.json" 2>&1 | tee "$OUT/$MODEL.log"
    CAL=${CALIBRATION:-$OUT/calibration.json}
    if [ ! -f "$CAL" ]; then
        timeout "$(left 90)" "$PY" -m harmony.cli calibrate --device cuda --precision "$PREC" -o "$CAL" 2>&1 | tee -a "$OUT/$MODEL.log"
    fi
    PROF=${PROFILE:-$OUT/$MODEL.profile.json}
    if [ ! -f "$PROF" ]; then
        timeout "$(left 150)" "$PY" -m harmony.cli profile "$OUT/$MODEL.model.json" -o "$PROF" --device cuda \
            --gpu-memory "$CAP" --precision "$PREC" --trials 3 --max-trial-s 0.25 2>&1 | tee -a "$OUT/$MODEL.log"
    fi
    timeout "$(left 120)" "$PY" -m harmony.cli schedule "$PROF" --model "$OUT/$MODEL.model.json" -D "$D" -N 1 \
        --mode vPP --gpu-memory "$CAP" --calibration "$CAL" -o "$OUT/$MODEL.schedule.json" \
        --candidates "$OUT/$MODEL.search.csv" --trace "$OUT/$MODEL.trace.json.gz" 2>&1 | tee -a "$OUT/$MODEL.log"
    step "$MODEL decompose+calibrate+profile+schedule" "${PIPESTATUS[0]}" $((SECONDS - t))
    t=$SECONDS
    timeout "$(left 400)" "$PY" -m harmony.cli run "$OUT/$MODEL.schedule.json" --iters "$ITERS" --warmup "$WARMUP" \
        --gpu-memory "$CAP" --precision "$PREC" --device cuda --memcpy-trace -o "$OUT/$MODEL.run.jsonl" 2>&1 | tee -a "$OUT/$MODEL.log"
    step "$MODEL run" "${PIPESTATUS[0]}" $((SECONDS - t))
    "$PY" - "$OUT/$MODEL.run.jsonl" <<'PYEOF' | tee "$OUT/$MODEL.acceptance.txt"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = lines[-1]
print("status", s["status"], s.get("message") or "")
for it in lines[:-1]:
    print(f"iteration {it['iteration']}: {it['time_s']:.3f} s, loss {it['loss']:.4f}, peak alloc {it['peak_allocated_bytes']}, "
          f"reserved {it['peak_reserved_bytes']}, rss {it['host_rss_bytes']:,}, pinned {it['host_pinned_bytes']:,}")
t, p, b, r = s["iter_time_s"], s["predicted_iter_time_s"], s["schedule_bound_s"], s["roofline_s"]
print(f"measured {t} s/iteration (median after warm-up), predicted {p}, schedule bound {b}, physical roofline {r}")
if t and p:
    print(f"  measured / predicted = {t / p:.3f}  (acceptance: within 15%: {abs(t / p - 1) <= 0.15})")
if t and b:
    print(f"  bound / measured = {b / t:.3f}  (acceptance: >= 0.80: {b / t >= 0.8})")
print("schedule-bound terms", json.dumps(s.get("schedule_bound_terms")))
print("roofline terms", json.dumps(s.get("roofline_terms")))
meas, sim, graph = s.get("bytes_by_kind") or {}, s.get("predicted_bytes_simulator") or {}, s.get("predicted_bytes") or {}
for k in sorted(meas):
    m, q, gb = meas[k], sim.get(k), graph.get(k)
    ok = (abs(m - q) <= 0.01 * max(q, 1)) if q is not None else None
    print(f"  bytes {k:12s} measured {m:>16,}  simulator {q if q is None else f'{q:,}':>16}  "
          f"count_bytes {gb:>16,}  within 1%: {ok}")
tr, cn = s.get("memcpy_trace") or {}, s.get("memcpy_counted") or {}
print(f"memcpy trace (torch.profiler, iteration {tr.get('iteration')}): {tr.get('source')}")
for k in ("h2d", "d2h", "p2p"):
    print(f"  {k}: traced {tr.get(k)}  counted {cn.get(k)}  rel diff {(s.get('memcpy_agreement') or {}).get(k)}")
print(f"  memcpy_agrees (every visible kind within 1%): {s.get('memcpy_agrees')}")
PYEOF
fi
echo; echo "=== steps ($SECONDS s in all) ==="; cat "$OUT/steps.txt"
