# Sourced by the A/B device scripts (alloc-ab, prefetch-plan-ab, prefetch-plan-h10-ab, issue-host, issue-min):
# one `harmony run` of a schedule at figure 10's paper settings on the H100 (11 GiB cap, TF32), skipped when
# its record exists, never fatal, its log next to the record.
#   [RUN_ENV="VAR=value ..."] [RUN_TIMEOUT_S=150] one_run OUT LABEL SCHEDULE [harmony run options...]
#   summarize_runs DIR     one line per record under DIR (python3 experiments/device/summarize_runs.py)
one_run() {
  local out=$1 label=$2 sched=$3; shift 3
  [ -s "$out" ] && return 0
  echo "[$SECONDS s] $label"
  env ${RUN_ENV:-} timeout "${RUN_TIMEOUT_S:-150}" harmony run "$sched" --data synthetic --gpu-memory 11GiB \
    --precision tf32 --device cuda --iters 5 "$@" -o "$out" > "${out%.jsonl}.log" 2>&1 || echo "FAILED: $out"
  tail -2 "${out%.jsonl}.log"
}
summarize_runs() { python3 "$(dirname "${BASH_SOURCE[0]}")/summarize_runs.py" "$@"; }
