#!/usr/bin/env bash
# Performance log 17's measurement on nvidia-h100-x1: does a vgg416 pack cost less, timed as a whole, than
# the sum of its vLayers' profiled times (what the simulator charges)? Packs of the committed plans:
# 82:164 at u = 8 (a BWD pack of the D = 256 plan, whose runs beat their prediction by 16%), and 82:117 at
# u = 8 and at u = 32 (a BWD pack of the D = 64 plan, u = 32, whose runs were 7% slower than predicted).
# Run through grid_gpu.sh (it puts `harmony` on PATH and tars RESULTS):
#   bash experiments/device/grid_gpu.sh experiments/device/checks-1xH100.sh results/paper/1xH100-80GB-HBM3 h100-checks
# Re-runnable: a finished check is skipped. Each is one profile of vgg416 at u = 8 and 32 (about 20 s) and the pack.
set -u
R=results/paper/1xH100-80GB-HBM3; D=$R/remeasure/pack-timing
mkdir -p "$D"
for check in 82:164@8 82:117@8 82:117@32; do
    rng=${check%@*}; u=${check#*@}
    out=$D/vgg416-${rng/:/-}-u$u.profile.json
    [ -s "$out" ] || [ -s "$out.gz" ] && continue   # committed gzipped (h100x2-checks2 ran them again: it looked for .json only)
    echo "[$SECONDS s] pack $rng at u=$u"
    harmony profile "$R/models/vgg416.json" --device cuda --precision tf32 --gpu-memory 11GiB --ubatch 8,32 \
      --check-pack "$rng" --check-ubatch "$u" -o "$out" > "${out%.profile.json}.log" 2>&1 || echo "FAILED: $out"
    grep -A1 "^pack " "${out%.profile.json}.log"
done
# Performance log 23: one copy per vLayer (--weight-copies per-vlayer) against one per tensor on the H100's
# most host-bound point, resnet1026 vPP D = 64 N = 1 (13,271 copies per iteration, GPU idle 52%),
# alternated A B A B; about 40 s per run.
R=results/paper/1xH100-80GB-HBM3; W=$R/resnet1026-D64-N1/remeasure/weight-copies
mkdir -p "$W"
for round in 1 2; do
  for copies in per-tensor per-vlayer; do
    out=$W/$copies.$round.jsonl
    [ -s "$out" ] && continue
    echo "[$SECONDS s] resnet1026 vPP N=1 D=64, --weight-copies $copies, round $round"
    harmony run "$R/resnet1026-D64-N1/harmony.schedule.json" --data synthetic --gpu-memory 11GiB --precision tf32 \
      --device cuda --iters 5 --weight-copies "$copies" -o "$out" > "${out%.jsonl}.log" 2>&1 || echo "FAILED: $out"
    tail -4 "${out%.jsonl}.log"
  done
done
# The checks below run `harmony run` on a committed schedule, each run once (skipped when its record exists).
R=results/paper/1xH100-80GB-HBM3; P=$R/remeasure/plan-ab
mkdir -p "$P"
one_run() {  # one_run OUT LIMIT_S LABEL SCHEDULE [harmony run options...]
  local out=$1 limit=$2 label=$3 sched=$4; shift 4
  [ -s "$out" ] && return 0
  echo "[$SECONDS s] $label"
  timeout "$limit" harmony run "$sched" --data synthetic --gpu-memory 11GiB --precision tf32 --device cuda \
    "$@" -o "$out" > "${out%.jsonl}.log" 2>&1 || echo "FAILED: $out"
  tail -3 "${out%.jsonl}.log"
}
# Performance log 29: small parameters stepped as one flat tensor per pack (--coalesce-below 4096, the default)
# against one tensor at a time (0), alternated, on the two points with the most small tensors per parameter:
# resnet1026 vPP D = 64 (2,057 of 3,086 tensors under 4,096 values) and bert96 vPP D = 16; about 40 s per run.
for cfg in resnet1026:64 bert96:16; do
  m=${cfg%:*}; d=${cfg#*:}
  for round in 1 2; do
    for cb in 0 4096; do
      one_run "$P/$m-D$d.coalesce$cb.$round.jsonl" 150 "$m vPP N=1 D=$d, --coalesce-below $cb, round $round" \
        "$R/schedules/$m/vPP-N1-D$d-auto.json" --iters 6 --coalesce-below $cb
    done
  done
done
# Performance log 28: resnet1026 vPP D = 64 ran 0.993 s with its old plan (searched from the pre-workflow
# profile; GPU-ff31d2f1) and 1.220 s with the re-searched one (GPU-55af49c5), and vgg416 D = 16 0.820 against
# 0.826 s. Plan or host? Both plans on one host, alternated old new old new, the first timed iteration traced
# (timeline: compute idle, copy busy, top kernels); about 40 s per run.
for mdl in resnet1026:64 vgg416:16; do
  m=${mdl%:*}; d=${mdl#*:}
  for round in 1 2; do
    for plan in old new; do
      sched=$R/schedules/$m/vPP-N1-D$d-auto.json
      # the old plans, copied out of superseded/ (which slim_tree.sh leaves out of the device's tree)
      [ "$plan" = old ] && sched=$P/old-plans/$m-vPP-N1-D$d-auto.json.gz
      one_run "$P/$m-D$d.$plan.$round.jsonl" 150 "$m vPP N=1 D=$d, $plan plan, round $round" "$sched" \
        --iters 6 --memcpy-trace
    done
  done
done
# Performance log 17's open question: vgg416 D = 256 (u = 8) runs 0.83x its prediction, D = 64 (u = 32) 1.08x,
# with a pack-vs-sum ratio of 0.95 at both u. Trace one iteration of each (--memcpy-trace: compute idle,
# copy busy, top kernels) for `harmony timeline`; about 40 s (D = 64) and 90 s (D = 256).
for d in 64 256; do
  one_run "$P/vgg416-D$d.traced.jsonl" 200 "vgg416 vPP N=1 D=$d traced" "$R/schedules/vgg416/vPP-N1-D$d-auto.json" \
    --iters 4 --memcpy-trace
done
