#!/usr/bin/env bash
# Device README item 47: the swap baselines whose records are MIN or more runtime commits older than
# Harmony's run of the same figure-10 point (experiments/runtime_gap.py; docs/performance.md entry 81),
# searched again beside that point's Harmony runs, so that each ratio is measured on one runtime and one
# host. For each such point, moves its records (both swap baselines': final record, search candidates and
# log; both Harmony runs', not their schedules) to RESULTS/superseded/pre-runtime-rerun/ and writes
# experiments/device/jobs-runtime-rerun-HW.sh, one listing per point so that its runs follow each other.
# Run here, where snakemake is, right before the call: until it runs, those points have no record.
#   HW=2xH200 NGPU=2 [MIN=10] [ONLY='MODEL MODEL/POINT ...'] bash experiments/device/make-jobs-runtime-rerun.sh [--dry]
#   --dry: print what would move and stop
#   ONLY: just these models or points (e.g. ONLY='gpt2-xl bert96/N1-D256': the points that decide the H100's
#   C3, entry 82), so that a session's calls can take those first
#   SYSTEMS: which records of each point move and run again (default 'swap-dp swap-pp harmony'); without
#   `harmony`, Harmony's runs stay, for points where an A/B showed its side unmoved by the code since its
#   run (entry 82: 0.994-1.001 on one H200) and measured the baselines' records as the stale side
#   POINTS='MODEL/POINT ...': these points, whatever runtime_gap.py finds (their swap records may already be
#   superseded: it then finds nothing there). A swap baseline of a point with no record (moved by an earlier
#   run of this script) is listed again whatever SYSTEMS says, so the list holds every swap record the point
#   lacks beside the runs it moves: the H100's GPT2-XL Harmony runs were added to its list so, because one
#   plan ran 1.8% apart on two H200s (docs/performance.md entry 86) and C3 there is within 2.5% of 1.0.
#   Harmony's runs of a point that an earlier run of this script moved are listed again likewise (with
#   `harmony` in SYSTEMS), so a list rewritten with more POINTS keeps the points already pending
set -euo pipefail
: "${HW:?set HW, e.g. HW=2xH200}"; : "${NGPU:?set NGPU, the GPUs of the machine that will run the list}"
MIN=${MIN:-10}; dry=0; [ "${1:-}" = --dry ] && dry=1
SYSTEMS=${SYSTEMS:-swap-dp swap-pp harmony}
for s in $SYSTEMS; do
  case $s in swap-dp|swap-pp|harmony) ;; *) echo "$0: SYSTEMS: $s is not one of swap-dp swap-pp harmony" >&2; exit 2 ;; esac
done
has() { case " $SYSTEMS " in *" $1 "*) return 0 ;; esac; return 1; }
CONF=(scale=paper hardware=$HW gpus_present=$NGPU iters=4)
if [ "$(git config --get core.sparseCheckout)" = true ]; then
  echo "$0: the tree is slim (experiments/device/slim_tree.sh on): run 'slim_tree.sh off' first" >&2; exit 2
fi
source "$(dirname "$0")/joblist_lib.sh"
old=$R/superseded/pre-runtime-rerun
if [ -n "${POINTS:-}" ]; then
  rows=(); for p in $POINTS; do rows+=("${p%%/*} ${p#*/}"); done
else
  # runtime_gap.py's rows: MODEL POINT HARMONY-MODE COMMIT BASELINE COMMIT GAP [(status)]
  # (read first: a process substitution would hide the script's failure, and an empty list reads as "none")
  gap=$(python experiments/runtime_gap.py "$R" --min "$MIN")
  mapfile -t rows < <(printf '%s\n' "$gap" | tail -n +3 | awk '{print $1, $2, $5}')
  [ ${#rows[@]} -gt 0 ] || { echo "no swap baseline in $R is $MIN or more runtime commits older than Harmony's run"; exit 0; }
fi
move() {   # move PATH: into the superseded folder, keeping its place under RESULTS
  local dest="$old/${1#"$R"/}"
  if [ $dry = 1 ]; then echo "would move $1"; return; fi
  mkdir -p "$(dirname "$dest")"; git mv "$1" "$dest"
}
moved_earlier() {   # moved_earlier RECORD: an earlier run of this script superseded it, so it is made again
  [ ! -e "$1" ] && [ -e "$old/${1#"$R"/}" ]
}
declare -A points=()
for row in "${rows[@]}"; do
  set -- $row
  if [ -n "${ONLY:-}" ]; then case " $ONLY " in *" $1 "*|*" $1/$2 "*) ;; *) continue ;; esac; fi
  points["$1 $2"]=""
done
[ ${#points[@]} -gt 0 ] || { echo "no stale point in $R matches ONLY='${ONLY:-}'"; exit 0; }
for key in "${!points[@]}"; do
  set -- $key; model=$1; point=$2
  # both swap baselines of the point, the one within MIN too: the point's Harmony runs are made again
  for system in swap-dp swap-pp; do
    base="$R/runs/$system/$model/$point-best"
    if moved_earlier "$base.jsonl"; then points[$key]+=" $base.jsonl"; continue; fi
    has "$system" || continue
    [ -e "$base.jsonl" ] || continue
    for f in "$base".jsonl "$base".u*.jsonl "$base".u*.jsonl.partial "$R/logs/baseline/$system/$model/$point-best.log"; do
      [ -e "$f" ] && move "$f"
    done
    points[$key]+=" $base.jsonl"
  done
  for mode in vPP vDP; do
    has harmony || break
    f="$R/runs/harmony-$mode/$model/$point-auto.jsonl"
    if moved_earlier "$f"; then points[$key]+=" $f"; continue; fi
    [ -e "$f" ] && { move "$f"; points[$key]+=" $f"; }
  done
done
if [ $dry = 1 ]; then
  for key in "${!points[@]}"; do for f in ${points[$key]}; do echo "would list $f"; done; done
  exit 0
fi
for key in $(printf '%s\n' "${!points[@]}" | tr ' ' '~' | sort); do
  listing -- ${points[${key//\~/ }]}
done
write_joblist "experiments/device/jobs-runtime-rerun-$HW.sh"
echo "moved to $old; the list: experiments/device/jobs-runtime-rerun-$HW.sh (pending_jobs.py gives its device time)"
