#!/usr/bin/env bash
# The four figure-10 vPP points whose schedules experiments/stale_schedules.py marked STALE (docs/performance.md
# entry 37), re-searched here from the workflow's profiles; built from jobs-1xH100.sh's gpt2-xl D = 256 lines.
# Run from the repository root. Re-runnable: a job whose outputs all exist (non-empty) is skipped.
# JOB_BUDGET_S=540 bash THIS.sh   -> stops starting new jobs after 540 s (default: no limit).
# JOB_SKIP=zero-offload bash THIS.sh -> leaves out the jobs whose first output matches that regex.
# GPU_SLOTS=4 bash THIS.sh       -> jobs of the rules 'profile' run side by side, one per GPU.
set -u
budget=${JOB_BUDGET_S:-0}; skip_re=${JOB_SKIP:-}; n_fail=0; n_run=0; n_skip=0; n_left=0; n_out=0
slots=${GPU_SLOTS:-1}; parallel_rules=' profile '; slot_pid=(); slot_job=()
all_exist() { for f in "$@"; do [ -s "$f" ] || return 1; done; }
reap() {  # reap SLOT: collect the exit status of the job that ran on that GPU
  [ -n "${slot_pid[$1]:-}" ] || return 0
  local rc=0; wait "${slot_pid[$1]}" || rc=$?; counted $rc "${slot_job[$1]}"
  slot_pid[$1]=''
}
counted() {  # counted RC LABEL: a job's exit status into the tally (75: left for the next call by design)
  case $1 in 0) n_run=$((n_run+1)) ;;
    75) echo "LEFT (would outlast the call): $2" >&2; n_left=$((n_left+1)) ;;
    *) echo "FAILED: $2" >&2; n_fail=$((n_fail+1)) ;; esac
}
drain() { local s; for ((s=0; s<slots; s++)); do reap $s; done; }
on_free_gpu() {  # on_free_gpu LABEL 'SHELL': start on the first GPU with nothing running
  local s
  while :; do
    for ((s=0; s<slots; s++)); do
      if [ -z "${slot_pid[$s]:-}" ] || ! kill -0 "${slot_pid[$s]}" 2>/dev/null; then
        reap $s; echo "[$SECONDS s] $1 (GPU $s)"
        CUDA_VISIBLE_DEVICES=$s bash -c "$2" & slot_pid[$s]=$!; slot_job[$s]=$1; return
      fi
    done
    sleep 1
  done
}
job() {  # job RULE 'SHELL' OUTPUT...
  local rule=$1 cmd=$2; shift 2
  if all_exist "$@"; then n_skip=$((n_skip+1)); return; fi
  if [ -n "$skip_re" ] && [[ "$1" =~ $skip_re ]]; then n_out=$((n_out+1)); return; fi
  if [ "$budget" -gt 0 ] && [ "$SECONDS" -ge "$budget" ]; then n_left=$((n_left+1)); return; fi
  for f in "$@"; do mkdir -p "$(dirname "$f")"; done
  if [ "$slots" -gt 1 ] && [[ "$parallel_rules" == *" $rule "* ]]; then on_free_gpu "$rule: $1" "$cmd"; return; fi
  drain
  echo "[$SECONDS s] $rule: $1"
  local rc=0; bash -c "$cmd" || rc=$?; counted $rc "$rule ($1)"
}
mkdir -p 'results/paper/1xH100-80GB-HBM3/logs/schedule/gpt2-xl'
job schedule 'python -m harmony.workflow guard --out results/paper/1xH100-80GB-HBM3/schedules/gpt2-xl/vPP-N1-D256-auto.json -- harmony schedule results/paper/1xH100-80GB-HBM3/profiles/gpt2-xl.json --model results/paper/1xH100-80GB-HBM3/models/gpt2-xl.json --minibatch 256 --gpus 1 --mode vPP --gpu-memory 11GiB --calibration results/paper/1xH100-80GB-HBM3/calibration.json  -o results/paper/1xH100-80GB-HBM3/schedules/gpt2-xl/vPP-N1-D256-auto.json --candidates results/paper/1xH100-80GB-HBM3/schedules/gpt2-xl/vPP-N1-D256-auto.csv --trace results/paper/1xH100-80GB-HBM3/schedules/gpt2-xl/vPP-N1-D256-auto.trace.json.gz > results/paper/1xH100-80GB-HBM3/logs/schedule/gpt2-xl/vPP-N1-D256-auto.log 2>&1' 'results/paper/1xH100-80GB-HBM3/schedules/gpt2-xl/vPP-N1-D256-auto.json'
mkdir -p 'results/paper/1xH100-80GB-HBM3/logs/run/harmony-vPP/gpt2-xl'
job run_harmony 'python -m harmony.workflow guard --out results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/gpt2-xl/N1-D256-auto.jsonl --schedule results/paper/1xH100-80GB-HBM3/schedules/gpt2-xl/vPP-N1-D256-auto.json --system harmony-vPP --model gpt2-xl --mode vPP --gpus 1 --minibatch 256 --device cuda --precision tf32 -- harmony run results/paper/1xH100-80GB-HBM3/schedules/gpt2-xl/vPP-N1-D256-auto.json --iters 4 --data synthetic --gpu-memory 11GiB --precision tf32 --device cuda -o results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/gpt2-xl/N1-D256-auto.jsonl > results/paper/1xH100-80GB-HBM3/logs/run/harmony-vPP/gpt2-xl/N1-D256-auto.log 2>&1' 'results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/gpt2-xl/N1-D256-auto.jsonl'
mkdir -p 'results/paper/1xH100-80GB-HBM3/logs/schedule/vgg416'
job schedule 'python -m harmony.workflow guard --out results/paper/1xH100-80GB-HBM3/schedules/vgg416/vPP-N1-D256-auto.json -- harmony schedule results/paper/1xH100-80GB-HBM3/profiles/vgg416.json --model results/paper/1xH100-80GB-HBM3/models/vgg416.json --minibatch 256 --gpus 1 --mode vPP --gpu-memory 11GiB --calibration results/paper/1xH100-80GB-HBM3/calibration.json  -o results/paper/1xH100-80GB-HBM3/schedules/vgg416/vPP-N1-D256-auto.json --candidates results/paper/1xH100-80GB-HBM3/schedules/vgg416/vPP-N1-D256-auto.csv --trace results/paper/1xH100-80GB-HBM3/schedules/vgg416/vPP-N1-D256-auto.trace.json.gz > results/paper/1xH100-80GB-HBM3/logs/schedule/vgg416/vPP-N1-D256-auto.log 2>&1' 'results/paper/1xH100-80GB-HBM3/schedules/vgg416/vPP-N1-D256-auto.json'
mkdir -p 'results/paper/1xH100-80GB-HBM3/logs/run/harmony-vPP/vgg416'
job run_harmony 'python -m harmony.workflow guard --out results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/vgg416/N1-D256-auto.jsonl --schedule results/paper/1xH100-80GB-HBM3/schedules/vgg416/vPP-N1-D256-auto.json --system harmony-vPP --model vgg416 --mode vPP --gpus 1 --minibatch 256 --device cuda --precision tf32 -- harmony run results/paper/1xH100-80GB-HBM3/schedules/vgg416/vPP-N1-D256-auto.json --iters 4 --data synthetic --gpu-memory 11GiB --precision tf32 --device cuda -o results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/vgg416/N1-D256-auto.jsonl > results/paper/1xH100-80GB-HBM3/logs/run/harmony-vPP/vgg416/N1-D256-auto.log 2>&1' 'results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/vgg416/N1-D256-auto.jsonl'
mkdir -p 'results/paper/1xH100-80GB-HBM3/logs/schedule/resnet1026'
job schedule 'python -m harmony.workflow guard --out results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D64-auto.json -- harmony schedule results/paper/1xH100-80GB-HBM3/profiles/resnet1026.json --model results/paper/1xH100-80GB-HBM3/models/resnet1026.json --minibatch 64 --gpus 1 --mode vPP --gpu-memory 11GiB --calibration results/paper/1xH100-80GB-HBM3/calibration.json  -o results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D64-auto.json --candidates results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D64-auto.csv --trace results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D64-auto.trace.json.gz > results/paper/1xH100-80GB-HBM3/logs/schedule/resnet1026/vPP-N1-D64-auto.log 2>&1' 'results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D64-auto.json'
mkdir -p 'results/paper/1xH100-80GB-HBM3/logs/run/harmony-vPP/resnet1026'
job run_harmony 'python -m harmony.workflow guard --out results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/resnet1026/N1-D64-auto.jsonl --schedule results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D64-auto.json --system harmony-vPP --model resnet1026 --mode vPP --gpus 1 --minibatch 64 --device cuda --precision tf32 -- harmony run results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D64-auto.json --iters 4 --data synthetic --gpu-memory 11GiB --precision tf32 --device cuda -o results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/resnet1026/N1-D64-auto.jsonl > results/paper/1xH100-80GB-HBM3/logs/run/harmony-vPP/resnet1026/N1-D64-auto.log 2>&1' 'results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/resnet1026/N1-D64-auto.jsonl'
mkdir -p 'results/paper/1xH100-80GB-HBM3/logs/schedule/resnet1026'
job schedule 'python -m harmony.workflow guard --out results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D1024-auto.json -- harmony schedule results/paper/1xH100-80GB-HBM3/profiles/resnet1026.json --model results/paper/1xH100-80GB-HBM3/models/resnet1026.json --minibatch 1024 --gpus 1 --mode vPP --gpu-memory 11GiB --calibration results/paper/1xH100-80GB-HBM3/calibration.json  -o results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D1024-auto.json --candidates results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D1024-auto.csv --trace results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D1024-auto.trace.json.gz > results/paper/1xH100-80GB-HBM3/logs/schedule/resnet1026/vPP-N1-D1024-auto.log 2>&1' 'results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D1024-auto.json'
mkdir -p 'results/paper/1xH100-80GB-HBM3/logs/run/harmony-vPP/resnet1026'
job run_harmony 'python -m harmony.workflow guard --out results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/resnet1026/N1-D1024-auto.jsonl --schedule results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D1024-auto.json --system harmony-vPP --model resnet1026 --mode vPP --gpus 1 --minibatch 1024 --device cuda --precision tf32 -- harmony run results/paper/1xH100-80GB-HBM3/schedules/resnet1026/vPP-N1-D1024-auto.json --iters 4 --data synthetic --gpu-memory 11GiB --precision tf32 --device cuda -o results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/resnet1026/N1-D1024-auto.jsonl > results/paper/1xH100-80GB-HBM3/logs/run/harmony-vPP/resnet1026/N1-D1024-auto.log 2>&1' 'results/paper/1xH100-80GB-HBM3/runs/harmony-vPP/resnet1026/N1-D1024-auto.jsonl'
drain
echo "ran $n_run, skipped $n_skip (done before), failed $n_fail, left $n_left (time budget), left out $n_out (JOB_SKIP)"
[ $n_fail -eq 0 ] && [ $n_left -eq 0 ]
