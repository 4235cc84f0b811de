#!/usr/bin/env bash
# Where does the memory model over-count a task that runs one microbatch (n <= u)? (docs/performance.md
# entry 87.) On the H100, the committed plans whose tasks each run a single microbatch allocated 0.07-0.65 GiB
# under their modelled peak (resimulated-peaks.txt: bert96 D = 16 9.58 -> 8.93 GiB), while the plans with
# several microbatches per task land within 0.03 GiB. This runs the GPU test suite on today's tree, then
# each schedule below for 3 iterations under the worker's per-task memory probe (HARMONY_TASK_PEAKS,
# docs/runtime.md): each task's start, peak and end bytes, to hold against the model task by task
# (`experiments/resimulate_runs.py ROOT --task-peaks SCHEDULE DIR`). Probed times are not the run's.
#   bash experiments/device/single-mb-probe-1gpu.sh OUTDIR     (GPU machine, repository root; tar OUTDIR)
# Knobs: SCHEDULES (NAME=schedule.json ...), CAP (11GiB), GPU_TESTS_S (240; 0 skips them), RUN_LIMIT_S (150).
set -uo pipefail
OUTDIR=${1:?usage: single-mb-probe-1gpu.sh OUTDIR}
R=results/paper/1xH100-80GB-HBM3
SCHEDULES=${SCHEDULES:-"gpt2xl-u16-d16=results/probes/runtime-gap/item49/gpt2-xl-vPP-N1-D16-headroom0.07.json
gpt2xl-u8-d16=$R/schedules/gpt2-xl/vDP-N1-D16-auto.json
bert96-u16-d16=$R/schedules/bert96/vPP-N1-D16-auto.json
bert96-u64-d64=$R/schedules/bert96/vPP-N1-D64-auto.json
vgg416-u16-d16=$R/schedules/vgg416/vPP-N1-D16-auto.json
resnet1026-u256-d256=$R/schedules/resnet1026/vPP-N1-D256-auto.json"}
CAP=${CAP:-11GiB}; RUN_LIMIT_S=${RUN_LIMIT_S:-150}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 -m harmony.cli env --device cuda --precision tf32 > "$OUTDIR/env.json"
nvidia-smi --query-gpu=uuid,name,memory.total,power.limit --format=csv > "$OUTDIR/gpu.csv" 2>&1
if [ "${GPU_TESTS_S:-240}" -gt 0 ]; then
  echo "[$SECONDS s] GPU tests"
  timeout "${GPU_TESTS_S:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider tests/ > "$OUTDIR/gpu-tests.log" 2>&1
  echo "GPU tests rc=$? $(tail -1 "$OUTDIR/gpu-tests.log")"
fi
for s in $SCHEDULES; do
  name=${s%%=*}; sch=${s#*=}; out=$OUTDIR/$name
  echo "[$SECONDS s] $name ($sch) probed"
  mkdir -p "$out"
  HARMONY_TASK_PEAKS=$out timeout "$RUN_LIMIT_S" python3 -m harmony.cli run "$sch" --iters 3 --data synthetic \
      --gpu-memory "$CAP" --precision tf32 --device cuda -o "$out.jsonl" > "$out.log" 2>&1 \
      || echo "FAILED ($?): $name"
  grep -h "s/iteration\|retried\|peak" "$out.log" | cut -c1-200 | tail -3
done
echo "[$SECONDS s] done"
