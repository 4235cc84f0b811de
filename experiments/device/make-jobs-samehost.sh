#!/usr/bin/env bash
# Figure 10's Harmony points of one machine kind profiled, searched and run on ONE host per model.
#   usage: [HW=1xH100-80GB-HBM3 NGPU=1] make-jobs-samehost.sh [--move] MODEL[=FOLDER]...
#   writes experiments/device/jobs-samehost-<HW up to its first '-'>.sh (jobs-samehost-1xH100.sh, jobs-samehost-2xH200.sh)
# Performance log 31: figure 10's Harmony points at N = 1 profiled, searched and run on ONE host each.
# Device times of a vLayer reproduce within 1% across lent H100 hosts; host issue times differ by 10-100%
# (remeasure/split-timing: h100-split1 against h100-samehost1). With a profile from the run's own host the
# split-timing charge predicted 3 of 5 sensitive points within 10% (7% mean error; the old bare-timed
# profiles 11%, two points 17-23% off). So each model's profile, its N = 1 schedules (vDP and vPP, figure
# 10's three D) and their runs go in one listing, one model after another, and a device call should hold
# whole models: vgg416 and resnet1026 in the first call, bert96 and gpt2-xl in the second (about 260 s a
# model). Before this, `--move` puts the old profile, N = 1 schedules and run records of MODELS under
# superseded/bare-timing-profile/ (git mv), so that the job list does not skip them.
# Entry 32 (plans at 10% headroom, run on one allocator pool): vgg416, resnet1026 and bert96 again, and gpt2-xl:
#   bash experiments/device/make-jobs-samehost.sh --move vgg416=copy-stream-5pct \
#       resnet1026=copy-stream-5pct bert96=copy-stream-5pct gpt2-xl     (gpt2-xl's records are the bare-timed ones)
#   bash experiments/device/make-jobs-samehost.sh --move vgg416 resnet1026 bert96 gpt2-xl
#   BUDGET_S=585 TAIL_S=70 bash experiments/device/grid_gpu.sh experiments/device/jobs-samehost-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-samehost2
# 2x H200 (N = 2, profiles from before split timing):
#   HW=2xH200 NGPU=2 bash experiments/device/make-jobs-samehost.sh --move vgg416 resnet1026 bert96 gpt2-xl
# MODES=vPP (default "vDP vPP"): only that mode's schedules and runs move and run again, and the profile
# stays (the other mode's records were made with it). Performance log entry 33's check on 2x H200:
#   HW=2xH200 NGPU=2 MODES=vPP bash experiments/device/make-jobs-samehost.sh --move vgg416=pre-held-sends \
#       resnet1026=pre-held-sends bert96=pre-held-sends gpt2-xl=pre-held-sends
# DS (default "16 64 256 1024": figure 10's minibatches) and CFGS (default auto: the searched plans; '*' also
# takes fixed configurations such as u10-5-p14) pick the records; MODEL:D,D=FOLDER takes that model's
# minibatches instead of DS. The four vPP plans experiments/stale_schedules.py marked STALE (performance
# log entry 37; sixteenth session, h100-stale1), re-searched on their profiles:
#   MODES=vPP PROFILE=keep bash experiments/device/make-jobs-samehost.sh --move gpt2-xl:256=stale-schedule \
#       vgg416:256=stale-schedule resnet1026:64,1024=stale-schedule Figure 8 (bert-large-nodrop, D = 600: the
# searched plan and four fixed ones), last run before entry 32's runtime:
#   DS=600 CFGS='*' MODES=vPP PROFILE=remake bash experiments/device/make-jobs-samehost.sh --move bert-large-nodrop=pre-entry-32
HW=${HW:-1xH100-80GB-HBM3}; NGPU=${NGPU:-1}; NS=${NS:-$NGPU}; CONF=(scale=paper hardware=$HW gpus_present=$NGPU iters=4)
DS=${DS:-16 64 256 1024}; CFGS=${CFGS:-auto}
MODES=${MODES:-vDP vPP}; both=0; [ "$MODES" = "vDP vPP" ] && both=1
# PROFILE=remake: the profile moves and is made again even with one mode (a model that has only vPP
# records); PROFILE=keep: it stays even with both modes (plans re-searched on the same profile)
case ${PROFILE:-} in remake) both=1 ;; keep) both=0 ;; "") ;; *) echo "PROFILE=remake|keep" >&2; exit 2 ;; esac
source "$(dirname "$0")/joblist_lib.sh"
move=0; [ "${1:-}" = --move ] && { move=1; shift; }
models=("$@"); wanted=(); [ ${#models[@]} -gt 0 ] || { echo "usage: $0 [--move] MODEL..." >&2; exit 2; }
# --move puts records under superseded/, which experiments/device/slim_tree.sh leaves out of the working tree
if [ $move = 1 ] && [ "$(git config --get core.sparseCheckout)" = true ]; then
  echo "$0: the working tree is slimmed (a sparse checkout without superseded/): run" \
       "'bash experiments/device/slim_tree.sh off' first, then 'on' again before the device call" >&2
  exit 2
fi
# NS (default NGPU, the host's GPUs): the run records' N values to move and make again, e.g. NS="1 2 4" for
# figures 17/18's fixed plans at every N of a four-GPU host (device README item 44):
#   HW=4xH200 NGPU=4 NS="1 2 4" DS=32 CFGS=u1-1-p2 bash experiments/device/make-jobs-samehost.sh --move \
#       gpt2-4096x6=pre-reprofile gpt2-4096x12=pre-reprofile gpt2-4096x18=pre-reprofile gpt2-4096x24=pre-reprofile
# MODEL=FOLDER moves that model's records to superseded/FOLDER instead (entry 32: copy-stream-5pct, the
# split-timing runs on two allocator pools at 5% headroom).
for arg in "${models[@]}"; do
  m=${arg%%=*}; folder=bare-timing-profile; [ "$m" != "$arg" ] && folder=${arg#*=}
  ds=$DS; [ "${m#*:}" != "$m" ] && { ds=${m#*:}; ds=${ds//,/ }; m=${m%%:*}; }
  old=$R/superseded/$folder
  if [ $move = 1 ] && [ -e "$R/profiles/$m.json" ]; then
    mkdir -p "$old/schedules/$m"
    [ $both = 1 ] && mkdir -p "$old/profiles" && git mv "$R/profiles/$m.json" "$old/profiles/"
    for mode in $MODES; do
      mkdir -p "$old/runs/harmony-$mode/$m"
      # a run's record and its schedule move together; a schedule without a run (a predicted point) stays,
      # for experiments/stale_schedules.py --rewrite to search again from the new profile
      for d in $ds; do for n in $NS; do
        for f in "$R"/runs/harmony-$mode/$m/N$n-D$d-$CFGS.jsonl; do
          [ -e "$f" ] || continue
          base=${f##*/}; base=${base%.jsonl}
          for g in "$R"/schedules/$m/$mode-$base.*; do [ -e "$g" ] && git mv "$g" "$old/schedules/$m/"; done
          git mv "$f" "$old/runs/harmony-$mode/$m/"
        done
      done; done
    done
  fi
  t=()   # the records this model's listing must make (every one moved away, or the folder's, without --move)
  for d in $ds; do for mode in $MODES; do for n in $NS; do
    for f in "$old"/runs/harmony-$mode/$m/N$n-D$d-$CFGS.jsonl; do
      [ -e "$f" ] && t+=("$R/runs/harmony-$mode/$m/${f##*/}")
    done
  done; done; done
  if [ $both = 1 ]; then listing -- "$R/profiles/$m.json" "${t[@]}"; else listing -- "${t[@]}"; fi
  wanted+=("${t[@]}")
done
out="experiments/device/jobs-samehost-${HW%%-*}.sh"
write_joblist "$out"
# Every record asked for that is not already there must have its job: h100-samehost10 to 13 ran a list
# that lacked three of the 24 (twenty-third session; how it was made is lost with that session), and
# nothing said so until the figures showed the points missing.
lacking=0
for f in "${wanted[@]}"; do
  [ -s "$f" ] || grep -qF -- "--out $f " "$out" || { echo "$0: $out has no job for $f" >&2; lacking=$((lacking+1)); }
done
[ $lacking -eq 0 ] || { echo "$0: $lacking record(s) without a job: do not run this list" >&2; exit 1; }
echo "$out: each of the ${#wanted[@]} record(s) asked for is there or has its job"
