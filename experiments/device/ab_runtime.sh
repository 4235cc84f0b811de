#!/usr/bin/env bash
# A/B of two versions of the runtime on one schedule, on one GPU machine, runs interleaved (A B A B ...) so
# that a drift of the host (load, page cache, clocks) hits both alike. A is this working tree; B is the
# same tree with PATCH applied (a `git diff` made on the CPU machine: the device's copy of the repository
# metadata may lag, so git refs are not used there).
#
#   git diff main wip/one-copy-per-vlayer > experiments/device/ab/b.patch      # CPU machine (untracked: it travels)
#   PATCH=experiments/device/ab/b.patch SCHEDULE=results/paper/1xH100-80GB-HBM3/resnet1026-D64-N1/harmony.schedule.json \
#     bash experiments/device/ab_runtime.sh /tmp/ab; tar czf $OUT/ab.tgz -C /tmp/ab .    # GPU machine
#
# Knobs: ROUNDS (2: A B A B), ITERS (5: warm-up, traced, 3 timed), CAP (11GiB; empty: the schedule's own),
# PREC (tf32), RUN_LIMIT_S (150 per run). Writes OUTDIR/{a,b}.<round>.jsonl/.log, OUTDIR/host.<run>.txt
# (load average, free memory and the heaviest processes just before each run: a busy host shows there) and
# prints the medians of A and B and B/A last.
set -uo pipefail
OUT=${1:?usage: ab_runtime.sh OUTDIR}
: "${PATCH:?PATCH=<a git diff to apply for B>}" "${SCHEDULE:?SCHEDULE=<schedule.json to run>}"
ROUNDS=${ROUNDS:-2}; ITERS=${ITERS:-5}; PREC=${PREC:-tf32}; CAP=${CAP-11GiB}; DEVICE=${DEVICE:-cuda}   # DEVICE=cpu CAP=: a smoke test
mkdir -p "$OUT"
A=$PWD; B=/tmp/ab-tree-b
rm -rf "$B" && mkdir -p "$B" && tar cf - --exclude=./results --exclude=./.git . | tar xf - -C "$B"
if ! (cd "$B" && { patch -p1 --quiet < "$A/$PATCH" 2>/dev/null || git apply "$A/$PATCH"; }); then
  echo "PATCH $PATCH does not apply to this tree" >&2; exit 2
fi
CAPARG=(); [ -n "$CAP" ] && CAPARG=(--gpu-memory "$CAP")
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PYTHONPATH=$A python3 -m harmony.cli env --device "$DEVICE" --precision "$PREC" > "$OUT/env.json"

one() {   # one LABEL TREE ROUND
  local label=$1 tree=$2 r=$3
  { uptime; free -g; ps -eo pid,pcpu,rss,etime,comm --sort=-pcpu | head -8; } > "$OUT/host.$label.$r.txt" 2>&1
  (cd "$tree" && timeout "${RUN_LIMIT_S:-150}" env PYTHONPATH="$tree" python3 -m harmony.cli run "$A/$SCHEDULE" \
     --device "$DEVICE" --iters "$ITERS" --warmup 1 --memcpy-trace "${CAPARG[@]}" --precision "$PREC" \
     -o "$OUT/$label.$r.jsonl" > "$OUT/$label.$r.log" 2>&1)
  echo "[$SECONDS s] $label round $r: rc=$? $(tail -2 "$OUT/$label.$r.log" | head -1)"
}
for r in $(seq 1 "$ROUNDS"); do one a "$A" "$r"; one b "$B" "$r"; done

python3 - "$OUT" <<'EOF'
import glob, json, statistics, sys
out = sys.argv[1]
t = {}
for label in ("a", "b"):
    for f in sorted(glob.glob(f"{out}/{label}.*.jsonl")):
        s = json.loads(open(f).read().splitlines()[-1])
        if s.get("record") == "summary" and s.get("iter_time_s"):
            t.setdefault(label, []).append(s["iter_time_s"])
for label, xs in t.items():
    print(f"{label}: s/iteration per run {[round(x, 4) for x in xs]}, median {statistics.median(xs):.4f}")
if "a" in t and "b" in t:
    print(f"B/A (medians): {statistics.median(t['b']) / statistics.median(t['a']):.3f}")
EOF
