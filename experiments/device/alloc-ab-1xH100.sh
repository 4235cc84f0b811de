#!/usr/bin/env bash
# Performance log 21 on the H100. Since entry 31 the H100 runs are never faster than predicted, and the
# ones furthest over their prediction are those whose caching allocator retries at the 11 GiB cap
# (allocated peak within the plan, reserved at 10.99-11.00 GiB): vgg416 vDP D = 16 (2 retries an
# iteration, 1.19x), vgg416 vDP D = 64 (12, 1.14x), bert96 vPP D = 64 (12, 1.13x); the runs without
# retries are 0.86-1.00x. A retry waits for all pending GPU work (the host loses its lead) and frees every
# cached block. Entry 21's reading: the copy stream's pool and the compute stream's cannot serve each
# other. Each point three ways, on one host, alternated: the default; --load-buffers compute-stream (one
# pool); and garbage_collection_threshold:0.8 (the allocator reclaims unused blocks before it falls back
# to a retry). If the retries are the cost, the last two come within 5% of the prediction with ~0 retries.
# About 30 s a run, 9 runs. Run through grid_gpu.sh:
#   BUDGET_S=585 TAIL_S=60 bash experiments/device/grid_gpu.sh experiments/device/alloc-ab-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-alloc1
set -u
R=results/paper/1xH100-80GB-HBM3; A=$R/remeasure/alloc-ab
mkdir -p "$A"
one_run() {  # [RUN_ENV="VAR=value ..."] one_run OUT LABEL SCHEDULE [harmony run options...]
  local out=$1 label=$2 sched=$3; shift 3
  [ -s "$out" ] && return 0
  echo "[$SECONDS s] $label"
  env ${RUN_ENV:-} timeout 150 harmony run "$sched" --data synthetic --gpu-memory 11GiB --precision tf32 --device cuda --iters 5 \
    "$@" -o "$out" > "${out%.jsonl}.log" 2>&1 || echo "FAILED: $out"
  tail -2 "${out%.jsonl}.log"
}
for point in vgg416:vDP:16 vgg416:vDP:64 bert96:vPP:64; do
  IFS=: read -r m mode d <<< "$point"
  sched=$R/schedules/$m/$mode-N1-D$d-auto.json
  one_run "$A/$m-$mode-D$d.default.jsonl" "$m $mode D=$d default" "$sched"
  one_run "$A/$m-$mode-D$d.compute-stream.jsonl" "$m $mode D=$d --load-buffers compute-stream" "$sched" \
    --load-buffers compute-stream
  RUN_ENV=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,garbage_collection_threshold:0.8 \
    one_run "$A/$m-$mode-D$d.gc08.jsonl" "$m $mode D=$d garbage_collection_threshold:0.8" "$sched"
done
python3 - "$A" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    s = json.loads(open(f).read().splitlines()[-1])
    if s.get("status") == "ok":
        print(f"{f.split('/')[-1]:<44} {s['iter_time_s']:7.3f} s  pred {s['predicted_iter_time_s']:7.3f}  "
              f"x{s['iter_time_s'] / s['predicted_iter_time_s']:.2f}  retries {s['alloc_retries']}")
    else:
        print(f"{f.split('/')[-1]:<44} {s.get('status')}: {s.get('message')}")
PY
