#!/usr/bin/env bash
# Does the runtime's version move the times figure 10 compares? (docs/performance.md entry 82, device README
# item 48.) swap-dp and swap-pp run on Harmony's runtime, and on the H100 most of their records were made 10 to
# 25 runtime commits before Harmony's runs of the same point (entry 81, experiments/runtime_gap.py). This runs
# one swap baseline and Harmony's plans (one or more) on one GPU under several versions of the code,
# interleaved (A B C, then C B A, ...) so that a drift of the host hits every version alike.
#
# The versions are trees made on the CPU machine, where git is (the device's copy carries no .git):
#   mkdir -p abtrees/C && git archive C harmony baselines pyproject.toml | tar x -C abtrees/C; echo C > abtrees/C/COMMIT   (untracked:
#   they travel with the working tree; delete them after the call)
#   ARMS='old=abtrees/60941922 harm=abtrees/8f09b409 new=.' bash experiments/device/runtime-gap-ab-1gpu.sh OUTDIR
#   (GPU machine, repository root), then tar OUTDIR into $OUT.
#
# Knobs: ARMS (label=tree ..., run in that order in odd rounds, reversed in even ones), BASE_ARMS (the labels
# that run the baseline; default: all), HARMONY_ARMS (the labels that run the SCHEDULES; empty: none), ROUNDS (2),
# ITERS (6) and WARMUP (2: four timed iterations),
# IN (results/paper/1xH100-80GB-HBM3: the folder whose model, profile and schedule are run), MODEL (gpt2-xl),
# D (16), U (16: the baseline's microbatch, the one its record chose), BASELINE (swap-pp), SCHEDULES
# (NAME=schedule.json ...: Harmony's plans, each run in every HARMONY_ARMS arm; default
# plan=$IN/schedules/$MODEL/vDP-N1-D$D-auto.json), CAP (11GiB; empty: none), DEVICE (cuda), PREC (tf32 on cuda,
# fp32 on the CPU), RUN_LIMIT_S (150 per run), DEADLINE_S (570: no run starts that could end after it),
# BASE_ARGS and RUN_ARGS (more `harmony baseline` and `harmony run` options, e.g. BASE_ARGS='--schedule-out F'
# to run the baseline's own schedule as a plan afterwards, RUN_ARGS='--worker-threads 4').
# Writes OUTDIR/base.LABEL.ROUND.jsonl/.log and harmony[-NAME].LABEL.ROUND.jsonl/.log (NAME for every plan
# but the one named `plan`), OUTDIR/host.*.txt (load and memory before each run),
# OUTDIR/env.json, and prints each arm's per-run times, medians and their ratios to the first arm's.
set -uo pipefail
OUTDIR=${1:?usage: runtime-gap-ab-1gpu.sh OUTDIR}
ARMS=${ARMS:?ARMS='label=tree ...' (see the header)}
HARMONY_ARMS=${HARMONY_ARMS-}
BASE_ARMS=${BASE_ARMS-all}
ROUNDS=${ROUNDS:-2}; ITERS=${ITERS:-6}; WARMUP=${WARMUP:-2}
IN=${IN:-results/paper/1xH100-80GB-HBM3}; MODEL=${MODEL:-gpt2-xl}; D=${D:-16}; U=${U:-16}
BASELINE=${BASELINE:-swap-pp}; CAP=${CAP-11GiB}; DEVICE=${DEVICE:-cuda}
PREC=${PREC:-$([ "$DEVICE" = cuda ] && echo tf32 || echo fp32)}
SCHEDULES=${SCHEDULES:-plan=${SCHEDULE:-$IN/schedules/$MODEL/vDP-N1-D$D-auto.json}}
RUN_LIMIT_S=${RUN_LIMIT_S:-150}; DEADLINE=$(( $(date +%s) + ${DEADLINE_S:-570} ))
ROOT=$PWD
mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd)
abs() { case $1 in /*) echo "$1";; *) echo "$ROOT/$1";; esac; }
MODEL_ARG=$MODEL; [ -f "$IN/models/$MODEL.json" ] && MODEL_ARG=$(abs "$IN/models/$MODEL.json")
PROFILE_ARG=(); [ -f "$IN/profiles/$MODEL.json" ] && PROFILE_ARG=(--profile "$(abs "$IN/profiles/$MODEL.json")")
CAP_ARG=(); [ -n "$CAP" ] && CAP_ARG=(--gpu-memory "$CAP")
export PYTHONUNBUFFERED=1
PYTHONPATH=$ROOT python3 -m harmony.cli env --device "$DEVICE" --precision "$PREC" > "$OUTDIR/env.json"
labels=(); declare -A AB_TREE                     # ab_tree_lib.sh's ab_step runs a label in AB_TREE[label]
for a in $ARMS; do
  l=${a%%=*}; t=$(abs "${a#*=}")
  [ -d "$t/harmony" ] || { echo "arm $l: $t holds no harmony/ (make it with git archive, header)" >&2; exit 2; }
  labels+=("$l"); AB_TREE[$l]=$t
  # which code each arm is: an archived tree's COMMIT file (its records' env cannot tell: no .git there)
  echo "$l ${a#*=} $(cat "$t/COMMIT" 2>/dev/null || echo 'the working tree (its records carry source_trees)')" >> "$OUTDIR/arms.txt"
done

# A run starts only while RUN_LIMIT_S still fits before the deadline, so every run but the first must start
# within DEADLINE_S - RUN_LIMIT_S: item 56's first call gave 300 and 250, and its Harmony run, second after a
# 139 s swap-pp run, never started (docs/performance.md entry 86). Said up front, where it can be fixed.
n_base=${#labels[@]}; [ "$BASE_ARMS" = all ] || n_base=$(wc -w <<< "$BASE_ARMS")
runs=$(( ROUNDS * (n_base + $(wc -w <<< "$SCHEDULES") * $(wc -w <<< "$HARMONY_ARMS")) ))
if [ "$runs" -gt 1 ] && [ $(( ${DEADLINE_S:-570} - RUN_LIMIT_S )) -lt $(( RUN_LIMIT_S / 2 )) ]; then
  echo "warning: $runs runs, and DEADLINE_S=${DEADLINE_S:-570} leaves $(( ${DEADLINE_S:-570} - RUN_LIMIT_S )) s after one" \
       "RUN_LIMIT_S=$RUN_LIMIT_S: a later run starts only if the runs before it took less than that in all" >&2
fi

. "$(dirname "${BASH_SOURCE[0]}")/ab_tree_lib.sh"
AB_OUT=$OUTDIR; AB_DEADLINE=$DEADLINE; export PYTHONPATH=${PYTHONPATH:-}
one() {   # one KIND LABEL ROUND -- harmony.cli arguments...: ab_step in the arm's tree, with the host's state
  local kind=$1 label=$2 r=$3; shift 4
  { uptime; free -g; ps -eo pid,pcpu,rss,etime,comm --sort=-pcpu | head -6; } > "$OUTDIR/host.$kind.$label.$r.txt" 2>&1
  # from inside the arm's tree (ab_step cds there): `python -m` puts the working directory first on sys.path
  ab_step "$kind" "$label" "$r" "$RUN_LIMIT_S" -- python3 -m harmony.cli "$@" -o "$OUTDIR/$kind.$label.$r.jsonl"
}

for r in $(seq 1 "$ROUNDS"); do
  order=("${labels[@]}")
  if [ $((r % 2)) = 0 ]; then order=(); for ((i=${#labels[@]}-1; i>=0; i--)); do order+=("${labels[$i]}"); done; fi
  for l in "${order[@]}"; do
    [ "$BASE_ARMS" = all ] || case " $BASE_ARMS " in *" $l "*) ;; *) continue ;; esac
    one base "$l" "$r" -- baseline "$BASELINE" "$MODEL_ARG" --minibatch "$D" --gpus 1 "${CAP_ARG[@]}" \
      --ubatch "$U" --iters "$ITERS" --warmup "$WARMUP" --device "$DEVICE" --precision "$PREC" "${PROFILE_ARG[@]}" \
      ${BASE_ARGS:-}
  done
  for sch in $SCHEDULES; do
    kind=harmony; [ "${sch%%=*}" = plan ] || kind="harmony-${sch%%=*}"
    for l in "${order[@]}"; do
      case " $HARMONY_ARMS " in *" $l "*)
        one "$kind" "$l" "$r" -- run "$(abs "${sch#*=}")" --iters "$ITERS" --warmup "$WARMUP" --data synthetic \
          "${CAP_ARG[@]}" --precision "$PREC" --device "$DEVICE" ${RUN_ARGS:-} ;;
      esac
    done
  done
done

python3 - "$OUTDIR" "${labels[@]}" <<'EOF'
import glob, json, statistics, sys
out, labels = sys.argv[1], sys.argv[2:]
kinds = sorted({f.rsplit("/", 1)[1].split(".")[0] for f in glob.glob(f"{out}/*.jsonl")}, key=lambda k: (k != "base", k))
for kind in kinds:
    med = {}
    for label in labels:
        t = []
        for f in sorted(glob.glob(f"{out}/{kind}.{label}.*.jsonl")):
            lines = open(f).read().splitlines()
            s = json.loads(lines[-1]) if lines else {}
            if s.get("status") == "ok" and s.get("iter_time_s"):
                t.append(s["iter_time_s"])
        if t:
            med[label] = statistics.median(t)
            print(f"{kind} {label}: s/iteration {', '.join(f'{x:.4f}' for x in t)}; median {med[label]:.4f}")
    first = next(iter(med), None)
    for label, m in med.items():
        if label != first:
            print(f"{kind} {label}/{first} (medians): {m / med[first]:.4f}")
EOF
