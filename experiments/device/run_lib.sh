# Sourced by the A/B device scripts (alloc-ab, prefetch-plan-ab, prefetch-plan-h10-ab, issue-host, issue-min):
# one `harmony run` of a schedule at figure 10's paper settings on the H100 (11 GiB cap, TF32), skipped when
# its record exists, never fatal, its log next to the record.
#   [RUN_ENV="VAR=value ..."] [RUN_TIMEOUT_S=150] one_run OUT LABEL SCHEDULE [harmony run options...]
#   [RUN_ENV=...] ab_one DIR SCHEDULES MODEL PLAN ROUND ARM [options...]   one run of an A/B (below)
#   summarize_runs DIR     one line per record under DIR (python3 experiments/device/summarize_runs.py)
one_run() {
  local out=$1 label=$2 sched=$3; shift 3
  [ -s "$out" ] && return 0
  echo "[$SECONDS s] $label"
  env ${RUN_ENV:-} timeout "${RUN_TIMEOUT_S:-150}" harmony run "$sched" --data synthetic --gpu-memory 11GiB \
    --precision tf32 --device cuda --iters 5 "$@" -o "$out" > "${out%.jsonl}.log" 2>&1 || echo "FAILED: $out"
  tail -2 "${out%.jsonl}.log"
}
# ab_one DIR SCHEDULES MODEL PLAN ROUND ARM [harmony run option...]: one run of an A/B on one host, into
# DIR/MODEL-PLAN-ARM.ROUND.jsonl, 6 iterations; round 1 memcpy-traced, with its `harmony timeline` text and
# the lines on NCCL (compute beside a resident NCCL kernel, entries 46-49). An arm set by the environment
# passes RUN_ENV (e.g. RUN_ENV=NCCL_P2P_USE_CUDA_MEMCPY=1 ab_one ...).
ab_one() {
  local dir=$1 sched=$2 m=$3 plan=$4 round=$5 arm=$6; shift 6
  local out=$dir/$m-$plan-$arm.$round.jsonl trace=()
  [ "$round" = 1 ] && trace=(--memcpy-trace)
  one_run "$out" "$m $plan, $arm, round $round" "$sched/$m/$plan.json" --iters 6 "${trace[@]}" "$@"
  if [ ${#trace[@]} -gt 0 ] && [ -s "$out" ]; then
    python3 -m harmony.cli timeline "$out" > "${out%.jsonl}.timeline.txt" 2>&1 \
      && grep -h "beside a resident\|NCCL busy" "${out%.jsonl}.timeline.txt"
  fi
  return 0
}
# ab_gpu_tests DIR NAME SECONDS 'PYTEST -k EXPR': the GPU tests an A/B's arm relies on, once per folder
# (DIR/pytest-NAME.log; a finished log is kept), before its runs
ab_gpu_tests() {
  local log=$1/pytest-$2.log
  [ -s "$log" ] && return 0
  timeout "$3" python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py -k "$4" > "$log" 2>&1
  tail -1 "$log"
}
# ab_abba DIR SCHEDULES OPTION A B MODEL/PLAN...: each plan A B B A (round 1 traced) through ab_one, the arm
# given to the run as `OPTION ARM` (eager-receive-ab.sh: --p2p-receive lazy eager; allreduce-overlap-ab.sh)
ab_abba() {
  local dir=$1 sched=$2 opt=$3 a=$4 b=$5 mp run; shift 5
  for mp in "$@"; do
    for run in "1 $a" "1 $b" "2 $b" "2 $a"; do
      set -- $run
      ab_one "$dir" "$sched" "${mp%%/*}" "${mp#*/}" "$1" "$2" "$opt" "$2"
    done
  done
}
summarize_runs() { python3 "$(dirname "${BASH_SOURCE[0]}")/summarize_runs.py" "$@"; }
