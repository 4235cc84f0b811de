#!/usr/bin/env bash
# Why Harmony's vPP plan at ResNet1026 D = 128 ran 1.17x its prediction (docs/performance.md entry 95): the plan
# again, three ways, one after another on one host. `plain` is a repeat, and `threads4` runs with
# --worker-threads 4 (CPU contention from the update threads' torch threads). `traced` runs with
# --memcpy-trace --trace-host-ops (where the issue thread's time goes). Paper settings: 11 GiB cap, TF32,
# 4 iterations (traced: 5, one of them traced), 1 warm-up.
#   bash experiments/device/holdout-diag-2xH200.sh OUTDIR      (SCHEDULE, RUN_LIMIT_S 150 a run)
set -uo pipefail
OUTDIR=${1:?usage: holdout-diag-2xH200.sh OUTDIR}
SCHEDULE=${SCHEDULE:-results/probes/holdout/2xH200/schedules/resnet1026/vPP-N2-D128-auto.json}
RUN_LIMIT_S=${RUN_LIMIT_S:-150}
export PYTHONUNBUFFERED=1
mkdir -p "$OUTDIR"
[ -s "$OUTDIR/env.json" ] || python3 -m harmony.cli env --device cuda --precision tf32 > "$OUTDIR/env.json"
COMMON=(--data synthetic --warmup 1 --gpu-memory 11GiB --precision tf32 --device cuda)
arm() {   # arm NAME harmony-run-options...: one bounded run, skipped if recorded
  local out=$OUTDIR/$1.jsonl; shift
  [ -s "$out" ] && return 0
  echo "[$SECONDS s] $(basename "$out" .jsonl)"
  timeout "$RUN_LIMIT_S" python3 -m harmony.cli run "$SCHEDULE" "${COMMON[@]}" "$@" -o "$out" > "${out%.jsonl}.log" 2>&1 \
    || echo "FAILED (rc $?): $out"
}
arm plain --iters 4
arm threads4 --iters 4 --worker-threads 4
arm traced --iters 5 --memcpy-trace --trace-host-ops
python3 -m harmony.cli timeline "$OUTDIR/traced.jsonl" > "$OUTDIR/traced.timeline.txt" 2>&1
for f in "$OUTDIR"/*.jsonl; do
  python3 -c "import json,sys; s=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(sys.argv[1], s['status'], s.get('iter_time_s'))" "$f"
done
head -40 "$OUTDIR/traced.timeline.txt"
