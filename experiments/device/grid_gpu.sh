#!/usr/bin/env bash
# One device call of a generated job list (experiments/device/jobs-*.sh): the list runs under a time
# budget, single-GPU jobs (profiles) one per GPU side by side, and everything it wrote under RESULTS comes
# back as one tarball (the device returns at most 8 files). Re-run it in the next call after unpacking
# the tarball into the working tree here: jobs whose outputs exist are skipped.
#   usage: experiments/device/grid_gpu.sh JOBLIST RESULTS|auto TAG   (repository root, on the GPU machine)
#   env:   BUDGET_S (540: the whole call), TAIL_S (60: no new job starts in the last TAIL_S seconds. Runs and
#          baseline searches leave themselves for the next call when their own estimate does not fit
#          (HARMONY_DEADLINE); the tail is for the jobs without one, profiles and searches of seconds. It was
#          150 s: x2-grid4 started no job in its last 130 s),
#          GPU_SLOTS (1: one job at a time; the GPU count runs profiles side by side, one per GPU. Their
#          host-side optimizer timings then share the host's memory bandwidth, as the workers of a run on
#          every GPU do; docs/performance.md entry 12 says what running them side by side with every core
#          each did to the 4x H200 profiles)
# Writes RESULTS/calls/TAG.{console.log,gpus.txt,topo.txt,env.json,calibration.json} and $OUT/TAG.tgz (RESULTS,
# logs included).
set -uo pipefail
JOBS=${1:?usage: $0 JOBLIST RESULTS TAG}; RESULTS=${2:?}; TAG=${3:?}
BUDGET_S=${BUDGET_S:-540}; TAIL_S=${TAIL_S:-60}
# A tag names a call's records for good: reusing one would overwrite an earlier call's calls/TAG.* (the
# sixty-second session's item 47 calls took next_call.sh's default x2-rerun1, a tag of the twenty-first's)
# A call whose records were moved elsewhere (a repeat kept under results/probes/) leaves calls/TAG.moved,
# naming where: it holds the tag as the console log does, and stands in for it as a predecessor below.
for held in "$RESULTS/calls/$TAG.console.log" "$RESULTS/calls/$TAG.moved"; do
  if [ -e "$held" ]; then
    echo "[$TAG] $held exists: that tag is an earlier call's; give this call a new TAG" >&2; exit 2
  fi
done
# PYTHONPATH, NCCL settings, the `harmony` wrapper and the carried wheels (sets `wheels`)
source "$(dirname "$0")/device_env.sh"
# Without the wheels (the call did not carry `.whl`) a zero-offload job would record itself `unavailable`, a
# result that says DeepSpeed cannot run here when it only was not carried (x4-base3, fifty-fifth session):
# leave those jobs for a call that carries them
if [ -z "$wheels" ] && ! python3 -c 'import deepspeed' 2>/dev/null && grep -q 'zero-offload' "$JOBS"; then
  echo "[$TAG] no DeepSpeed wheels under .whl (carry .whl): the list's zero-offload jobs are left out" >&2
  export JOB_SKIP="${JOB_SKIP:+$JOB_SKIP|}zero-offload"
fi
# The environment record, once: it names the hardware for RESULTS `auto` and for the check below.
env_json=$(mktemp)
python3 -m harmony.cli env --device cuda --precision tf32 > "$env_json" 2>/dev/null
# RESULTS `auto`: the folder of the hardware the call got (results/paper/<harmony.metrics.hardware_tag>), for
# an A/B whose comparison holds on whichever cards the tool lends; the job list reads it as $RESULTS_DIR
if [ "$RESULTS" = auto ]; then
  RESULTS=results/paper/$(python3 -c 'import json, sys; from harmony.metrics import hardware_tag
print(hardware_tag(json.load(open(sys.argv[1]))))' "$env_json" 2>/dev/null) \
    || { echo "[$TAG] RESULTS auto: no environment record to name the hardware by" >&2; exit 2; }
fi
export RESULTS_DIR=$RESULTS
# A numbered call (h200n1-14) runs on a copy of the tree here: without its predecessor's records (its
# tarball not yet unpacked, unpack_call.sh) it would run the predecessor's jobs again. h200n1-14, started in
# the 30 s warm window, spent 524 s doing so (eighty-fourth session). ALLOW_GAP=1 for a series that skips a number.
# (h200n1-15 was refused while h200n1-14's records sat under results/probes/reproduce/ with no calls/h200n1-14.moved.)
# (h200n1-14, x2-grid15 and i51 are numbered; i51b and x2-seed0a are not.)
if [[ $TAG =~ ^(.*[^0-9])([0-9]+)$ ]] && [ "${ALLOW_GAP:-0}" != 1 ]; then
  prev="${BASH_REMATCH[1]}$(( 10#${BASH_REMATCH[2]} - 1 ))"
  if [ ! -e "$RESULTS/calls/$prev.console.log" ] && [ ! -e "$RESULTS/calls/$prev.moved" ] && compgen -G "$RESULTS/calls/${BASH_REMATCH[1]}[0-9]*.console.log" >/dev/null; then
    echo "[$TAG] refused, no job ran: $RESULTS/calls/ has earlier calls of this series but not $prev's;" \
         "unpack its tarball here first (experiments/device/unpack_call.sh), or ALLOW_GAP=1" >&2
    exit 2
  fi
fi
mkdir -p "$RESULTS/calls"
mv "$env_json" "$RESULTS/calls/$TAG.env.json"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv > "$RESULTS/calls/$TAG.gpus.txt" 2>&1
nvidia-smi topo -m > "$RESULTS/calls/$TAG.topo.txt" 2>&1
# The device tool may lend other cards than the kind asked for (x2-ncclab1 asked for 2x H200 and got 2x H100):
# a job list runs only on the hardware its results folder is named for (harmony.metrics.hardware_mismatch).
why=$(python3 -c 'import json, sys; from harmony.metrics import hardware_mismatch
print(hardware_mismatch(json.load(open(sys.argv[1])), sys.argv[2]) or "")' "$RESULTS/calls/$TAG.env.json" "$RESULTS" 2>/dev/null)
if [ -n "$why" ] && [ "${ALLOW_OTHER_HW:-0}" != 1 ]; then
  echo "[$TAG] refused, no job ran: $why" | tee "$RESULTS/calls/$TAG.console.log"
  [ -n "${OUT:-}" ] && tar czf "$OUT/$TAG.tgz" "$RESULTS/calls/$TAG".* && ls -la "$OUT"   # which cards came
  exit 3
fi
# This host's links and CPU optimizer rate (about 10 s): the lent machines of one kind differ (the same
# bert96 schedule ran 0.82 and 1.05 s per iteration on two H100 hosts, docs/performance.md entry 18), so
# every call records what its host measured, next to the calibration the schedules were made with.
python3 -m harmony.cli calibrate --device cuda --precision tf32 --quiet -o "$RESULTS/calls/$TAG.calibration.json" \
  > "$RESULTS/calls/$TAG.calibration.log" 2>&1 || echo "[$TAG] calibrate failed: $RESULTS/calls/$TAG.calibration.log"
slots=${GPU_SLOTS:-1}
# Work that cannot finish before the job list is stopped is left, with no record, for the next call
# (harmony.jsonio.Deferred: a search's next candidate, a run's next iteration, a schedule's predicted
# run); h100-grid9 spent 5 minutes on a resident candidate the call's end then killed.
# HARMONY_CALL_S: the whole window. A baseline run that began with all of it and still cannot time one
# iteration is recorded `over-time` (no call of this length would finish it), not left for the next call.
# Every limit counts from the call's start, not the list's: the set-up above takes 15-25 s, and a job list
# stopped BUDGET_S - 20 s after its own start with a DeepSpeed run in flight ran the call past the device
# tool's 600 s, which then returned no tarball at all (h100-grid40).
left=$(( BUDGET_S - SECONDS ))
# Every process the list starts inherits GRID_CALL_ID, orphans of a killed job too, so the clean-up below
# ends this call's processes only, not another grid's or a test's beside it.
export GRID_CALL_ID="$TAG.$$.$(date +%s%N)"
export HARMONY_DEADLINE=$(( $(date +%s) + left - 30 )) HARMONY_CALL_S=$(( left - 30 ))
echo "[$TAG] $JOBS, $slots job(s) side by side, $(nvidia-smi -L 2>/dev/null | grep -c '^GPU') GPUs, budget ${BUDGET_S}s, ${SECONDS}s of it on set-up (the list: no new job after $((left - TAIL_S))s, stopped at $((left - 20))s)" | tee "$RESULTS/calls/$TAG.console.log"
GPU_SLOTS=$slots JOB_BUDGET_S=$((left - TAIL_S)) timeout -k 10 $((left - 20)) bash "$JOBS" 2>&1 \
  | tee -a "$RESULTS/calls/$TAG.console.log"
rc=${PIPESTATUS[0]}
case $rc in   # the job list exits 1 when a job failed or jobs were left for lack of time (its last line says which)
  0) why="every job done" ;;
  1) why="see the 'ran/skipped/failed/left' line above: failed jobs have error records, left ones run next call" ;;
  124|137) why="stopped at the call's budget; the job in flight left no record and runs again next call" ;;
  *) why="unexpected" ;;
esac
echo "[$TAG] job list rc=$rc ($why)" | tee -a "$RESULTS/calls/$TAG.console.log"
# Only processes that ARE the CLI (their command line starts with it): a bare "harmony.cli" pattern also
# matched the device call's own shell when its command line named harmony.cli, and killed the call before
# this tarball was written (h100-retain1, 2026-11-24: 6 minutes of runs lost).
# And only this call's (GRID_CALL_ID in its environment): the machine-wide pkill ended a CPU test's baseline
# run when a grid_gpu.sh test ran beside it under pytest-xdist (eighty-fifth session).
for pid in $(pgrep -f '^python3? -m harmony\.cli' 2>/dev/null); do
  tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qxF "GRID_CALL_ID=$GRID_CALL_ID" && kill "$pid" 2>/dev/null
done
sleep 2
if [ -n "${OUT:-}" ]; then tar czf "$OUT/$TAG.tgz" "$RESULTS" && ls -la "$OUT"; fi
