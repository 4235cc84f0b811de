# Sourced by the A/B device scripts that compare this tree (A) with a patched copy of it (B):
# host-overhead-ab-1xH100.sh (entry 43) and host-work-ab-1gpu.sh (entry 75); runtime-gap-ab-1gpu.sh (entry 82)
# takes ab_step for its arms, each a commit's archived tree (AB_TREE).
#   make_b_tree PATCH      sets A (this tree) and B (/tmp/ab-tree-b: A without results/.git/.whl, PATCH applied);
#                          exits 2 when PATCH does not apply
#   ab_step NAME LABEL ROUND LIMIT_S -- command...
#                          runs the command in LABEL's tree (a or b, or AB_TREE[LABEL]) under `timeout LIMIT_S`, its output in
#                          $AB_OUT/NAME.LABEL.ROUND.log; skipped when $AB_DEADLINE (epoch s) is nearer
#   ab_summary DIR RUNS... one line per RUN name and tree: the ok records' s/iteration and their median,
#                          then the benchmark rows (runtime_overhead.py's) of DIR/{overhead,bert}.*.log
make_b_tree() {
  local patch=$1
  A=$PWD; B=/tmp/ab-tree-b
  rm -rf "$B" && mkdir -p "$B" && tar cf - --exclude=./results --exclude=./.git --exclude=./.whl . | tar xf - -C "$B"
  if ! (cd "$B" && patch -p1 --quiet < "$A/$patch"); then
    echo "PATCH $patch does not apply to this tree" >&2; exit 2
  fi
}

ab_step() {
  local name=$1 label=$2 r=$3 limit=$4; shift 5
  # LABEL's tree: AB_TREE[LABEL] where the caller names more arms (runtime-gap-ab-1gpu.sh), else A or B
  local tree=
  if declare -p AB_TREE >/dev/null 2>&1; then tree=${AB_TREE[$label]:-}; fi   # an associative array, when set
  [ -n "$tree" ] || { tree=$A; [ "$label" = b ] && tree=$B; }
  if [ $(( $(date +%s) + limit )) -gt "$AB_DEADLINE" ]; then
    echo "[$SECONDS s] $name $label round $r: left (the call's deadline is nearer than its ${limit} s)"; return
  fi
  (cd "$tree" && PYTHONPATH="$tree:${PYTHONPATH#*:}" timeout "$limit" "$@") > "$AB_OUT/$name.$label.$r.log" 2>&1
  echo "[$SECONDS s] $name $label round $r: rc=$? $(grep -v Warning "$AB_OUT/$name.$label.$r.log" | tail -1 | cut -c1-150)"
}

ab_summary() {
  python3 - "$@" <<'EOF'
import glob, json, re, statistics, sys
out, runs = sys.argv[1], sys.argv[2:]
for name in runs:
    for label in ("a", "b"):
        t = []
        for f in sorted(glob.glob(f"{out}/{name}.{label}.*.jsonl")):
            lines = open(f).read().splitlines()
            s = json.loads(lines[-1]) if lines else {}
            if s.get("status") == "ok":
                t.append(s["iter_time_s"])
        print(f"{name} {label}: s/iteration {', '.join(f'{x:.3f}' for x in t) or 'none'}"
              + (f", median {statistics.median(t):.3f}" if t else ""))
for name in ("overhead", "bert"):
    for label in ("a", "b"):
        for f in sorted(glob.glob(f"{out}/{name}.{label}.*.log")):
            rows = [l.rstrip() for l in open(f) if re.match(r"\s+[18]\s+per-vlayer", l)]
            print(f"{f.split('/')[-1]}: " + " | ".join(rows))
EOF
}
