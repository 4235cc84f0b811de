#!/usr/bin/env bash
# The queued device call, chosen by the cards the tool lends (device README, "Next call"). A request may be
# lent another card of its size, so the call asks the machine which it is and runs that kind's item; each
# branch stays under the tool's 600 s limit on its own (grid_gpu.sh's budget, or `timeout`) and writes its
# tarball to $OUT after the work, so a cut step still comes back. Run from the repository root:
#   bash experiments/device/slim_tree.sh on 2xH200
#   cp results/paper/1xH100-80GB-HBM3/calibration.json .whl/cal-1xH100.json   # before slimming: the two-H100
#                                                                            # branch reads it, the slim tree lacks it
#   device: bash experiments/device/next_call.sh [TAG]     (carry .whl: the DeepSpeed wheels zero-offload needs, and cal-1xH100.json)
# Four GPUs: see that branch for the job list to write first.
# Committed (the fiftieth session found the ignored `.whl/call.sh` of the session before gone with its checkout).
set -u
export PYTHONPATH=$PWD    # every branch calls `python3 -m harmony...` (grid_gpu.sh puts its own `harmony` on the PATH)
HW=$(python3 -m harmony.cli env --device cuda 2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["hardware_tag"])')
echo "lent: $HW"; nvidia-smi -L
unused_tag() {   # unused_tag PREFIX: PREFIX1, PREFIX2, ...: the first this folder's calls/ has no record of
  local n=1; while [ -e "results/paper/$HW/calls/$1$n.console.log" ]; do n=$((n + 1)); done; echo "$1$n"
}
runtime_rerun() {   # item 47: a folder's stale swap baselines and Harmony runs side by side (list written first)
  local list="experiments/device/jobs-runtime-rerun-$HW.sh"
  if [ ! -s "$list" ]; then
    echo "$list is not written: run 'HW=$HW NGPU=... bash experiments/device/make-jobs-runtime-rerun.sh' here first (device README, item 47)"; exit 2
  fi
  BUDGET_S=585 TAIL_S=70 bash experiments/device/grid_gpu.sh "$list" "results/paper/$HW" "$1"
}
host_task() {   # item 42 (done on 2x H200, HISTORY.md): the per-task host charge (entry 78) on GPU 0, ~3 min
  mkdir -p /tmp/ht
  CUDA_VISIBLE_DEVICES=0 timeout 400 python3 benchmarks/runtime_overhead.py --device cuda --packs 1 2 4 8 16 \
    --minibatch 8 --ubatch 8 --iters 10 --warmup 2 > /tmp/ht/overhead.log 2>&1; echo "runtime_overhead rc=$?"
  # the same fit on BERT layers (16 parameter tensors a layer against a ResNet block's 6, with dropout): a
  # per-task charge that grows with the tensors a task moves shows here as a larger slope
  CUDA_VISIBLE_DEVICES=0 timeout 150 python3 benchmarks/runtime_overhead.py --device cuda --model bert-tiny \
    --set n_layer=32 hidden_dropout=0.1 attn_dropout=0.1 --packs 1 2 4 8 16 --minibatch 8 --ubatch 8 \
    --iters 10 --warmup 2 > /tmp/ht/overhead-bert.log 2>&1; echo "runtime_overhead bert rc=$?"
  CUDA_VISIBLE_DEVICES=0 python3 -m harmony.cli env --device cuda > /tmp/ht/env.json
  tail -8 /tmp/ht/overhead.log; tail -8 /tmp/ht/overhead-bert.log; tar czf "$OUT/${1:-ht1}.tgz" -C /tmp ht
}
pack_probe() {   # TAG DIR: the GPUs' identity into DIR (a folder under results/), DIR tarred into $OUT/TAG.tgz
  nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit --format=csv > "$2/gpu.csv"
  tar czf "$OUT/$1.tgz" "$2"
}
n1_probe_done() {   # TAG DIR: a one-GPU probe's console (/tmp/TAG.console) into DIR, then pack_probe (items 67, 72, 73)
  cp "/tmp/$1.console" "$2/console.log"
  pack_probe "$1" "$2"
}
keep_layout() {   # items 64 and 65 (entry 107): TAG [PLANS]: the channels-last GPU test (--keep-layout's cases
  # too) into results/probes/keep-layout/$HW/TAG/, then keep-layout-ab.sh there (PLANS: its default when empty)
  local T=$1 K=results/probes/keep-layout/$HW/$1
  mkdir -p "$K"
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py -k channels_last -rA \
    > "$K/gpu-test.log" 2>&1; echo "gpu test rc=$?"; tail -2 "$K/gpu-test.log"
  PLANS=${2:-} DEADLINE_S=$((560 - SECONDS)) bash experiments/device/keep-layout-ab.sh "$K" 2>&1 | tee "$K/console.log"
  pack_probe "$T" "$K"
}
point_ab() {   # items 50, 51, 53: TAG D U_ONCE U ITERS WARMUP SCHEDULES on GPT2-XL with the H100's profile and cap,
  # today's code: $BASELINE (swap-pp unless set) at U_ONCE once (does it fit? 2 iterations, 1 timed), then
  # at U against Harmony's SCHEDULES, interleaved over two rounds (runtime-gap-ab-1gpu.sh), each run ITERS
  # iterations of which WARMUP untimed
  local T=$1 D=$2 U1=$3 U=$4 IT=$5 WU=$6 SCH=$7
  ARMS='new=.' D=$D U=$U1 ITERS=2 WARMUP=1 ROUNDS=1 RUN_LIMIT_S=140 DEADLINE_S=150 \
    bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/u$U1" > "/tmp/$T.console" 2>&1
  ARMS='new=.' HARMONY_ARMS=new D=$D U=$U ITERS=$IT WARMUP=$WU ROUNDS=2 RUN_LIMIT_S=140 \
    DEADLINE_S=$((560 - SECONDS)) SCHEDULES="$SCH" \
    bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/u$U" >> "/tmp/$T.console" 2>&1
  pack_ab "$T" 14
}
threads_ab() {   # TAG RUN_EXTRA (items 58, 59; MODEL D U ITERS WARMUP RUN_LIMIT_S DEADLINE from the caller): swap-dp
  # at N = 1 with 2x H200's profile, once, writing its schedule; then that schedule with `harmony run` at 16
  # and 4 worker threads, A B B A (the optimizer's steps and the host's gradient adds run on those threads,
  # beside the issue loop), RUN_EXTRA added to each run; every pass into /tmp/TAG/SUB, the console into TAG.tgz
  local T=$1 X=$2 S=/tmp/$1/swapdp-schedule.json
  pass() {   # SUB BASE_ARMS HARMONY_ARMS [RUN_ARGS]
    ARMS='new=.' BASE_ARMS=$2 HARMONY_ARMS=$3 RUN_ARGS=${4:-} IN=results/paper/2xH200 BASELINE=swap-dp ROUNDS=1 \
      DEADLINE_S=$((DEADLINE - SECONDS)) SCHEDULES="plan=$S" BASE_ARGS="--schedule-out $S" \
      bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/$1" >> "/tmp/$T.console" 2>&1
  }
  mkdir -p "/tmp/$T"
  pass base new ''
  runargs_ab "$T" "$S" "w16-1|--worker-threads 16 $X" "w4-1|--worker-threads 4 $X" "w4-2|--worker-threads 4 $X" \
    "w16-2|--worker-threads 16 $X"
}
runargs_ab() {   # TAG SCHEDULE 'SUB|RUN_ARGS' ... (MODEL D U ITERS WARMUP RUN_LIMIT_S DEADLINE from the caller; IN
  # too, else 2x H200's folder): SCHEDULE with `harmony run` and IN's model under each RUN_ARGS in turn, each
  # pass into /tmp/TAG/SUB, the console and the passes into TAG.tgz
  local T=$1 S=$2 p; shift 2
  mkdir -p "/tmp/$T"
  for p in "$@"; do
    ARMS='new=.' BASE_ARMS='' HARMONY_ARMS=new RUN_ARGS="${p#*|}" IN=${IN:-results/paper/2xH200} ROUNDS=1 \
      DEADLINE_S=$((DEADLINE - SECONDS)) SCHEDULES="plan=$S" \
      bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/${p%%|*}" >> "/tmp/$T.console" 2>&1
  done
  pack_ab "$T" 16
}
pack_ab() {   # TAG LINES: an A/B call's console into its folder with the GPU's identity, tarred into $OUT
  tail -"$2" "/tmp/$1.console"; cp "/tmp/$1.console" "/tmp/$1/console.log"
  nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit --format=csv > "/tmp/$1/gpu.csv"
  tar czf "$OUT/$1.tgz" -C /tmp "$1"
}
case "$HW" in
  2xH200)             # item 45 (done, sixty-second session): figures 17 and 8's fixed plans, measured again
    # (about 10 minutes in two calls, x2-repredfix1 and 2; slim: SLIM_ALSO='results/large/
    # results/paper/2xH200/runs/swap-pp/'); ITEM=42 measures the per-task host charge again (host_task above);
    # ITEM=47 runs the stale swap baselines again beside Harmony (runtime_rerun above; its list written first)
    # ITEM=63 (the default): figure 10's convolutional points with channels-last activations, every system,
    # from experiments/device/jobs-variant-2xH200.sh (make-jobs-variant.sh writes it), several calls;
    # GPU_TEST=1 first runs the channels-last GPU test into calls/TAG.gpu-test.log; HANG_CHECK=1 first runs
    # entry 107's hung swap-pp candidate again (hang-check-2xH200.sh, at most 300 s) into
    # results/probes/hang/2xH200/TAG/, tarred as TAG-hang.tgz; HANG_FIX=1 (item 66) instead runs the two N = 2
    # channels-last GPU tests and that candidate once, about 150 s, into the same folder. ITEM=68: item 68's
    # repeats first, then the list. ITEM=69: item 69's search first (entry 110), then the list. ITEM=64: the
    # channels-last GPU test (with --keep-layout's cases) into results/probes/keep-layout/2xH200/TAG/, then keep-layout-ab.sh there
    # ITEM=70: item 70's repeats first (entry 111), then the list. ITEM=71: item 71's two runs at the cap first.
    # ITEM=74: jobs-records-2xH200.sh first (swap-pp ResNet1026 D = 1024's search again, entry 113), then the list.
    # CALL_BUDGET_S (default 585): the seconds items 63, 68, 69, 70, 71 and 74 plan for, less when less device time is left
    if [ "${ITEM:-63}" = 64 ]; then keep_layout "${1:-$(unused_tag x2-keep)}"; exit 0; fi
    if [ "${ITEM:-63}" = 42 ]; then host_task "${1:-ht1}"
    elif [ "${ITEM:-63}" = 47 ]; then runtime_rerun "${1:-$(unused_tag x2-rtrerun)}"
    elif [[ " 63 68 69 70 71 74 " == *" ${ITEM:-63} "* ]]; then   # item 63's list, after the item's own work
      T=${1:-$(unused_tag x2-cl)}; C=results/paper/2xH200/calls
      if [[ " 69 74 " == *" ${ITEM:-63} "* ]]; then   # the superseded records of jobs-records-2xH200.sh made
        # again as TAG-rec, then the list. Item 69 (done, entry 110): swap-pp VGG416 D = 256's search, which had
        # stopped at an infeasible u = 16; item 74 (entry 113): swap-pp ResNet1026 D = 1024's, which had stopped
        # at u = 16, a local peak (about 400 s from the predicted start, u = 256)
        BUDGET_S=$((${CALL_BUDGET_S:-585} - SECONDS)) TAIL_S=70 bash experiments/device/grid_gpu.sh experiments/device/jobs-records-2xH200.sh \
          results/paper/2xH200 "$T-rec"
      fi
      if [ "${ITEM:-63}" = 71 ]; then   # item 71 (entry 111): swap-pp VGG416 D = 256's u = 8 schedule, which hung
        # at the memory cap in x2-cl13-rec, once with eager receives (as it ran) and once lazy (each posted just
        # before its microbatch), 3 iterations each, at most 250 s each, into results/probes/hang/2xH200/TAG-cap/;
        # on a hang the launcher's new window (120 s after set-up) ends the run. Then the list with what is left
        P=results/probes/hang/2xH200/$T-cap; mkdir -p "$P"
        for mode in eager lazy; do
          timeout 250 python3 -m harmony.cli run experiments/device/schedules/vgg416.D256.N2.swap-pp-u8.schedule.json \
            --data synthetic --iters 3 --warmup 1 --gpu-memory 11GiB --precision tf32 --device cuda \
            --p2p-receive "$mode" -o "$P/$mode.jsonl" > "$P/$mode.log" 2>&1; echo "[$SECONDS s] $mode rc=$?"
          tail -2 "$P/$mode.log" | cut -c1-300
        done
        pack_probe "$T-cap" "$P"
      fi
      if [ "${ITEM:-63}" = 70 ]; then   # item 70 (entry 111): VGG416 D = 256's vDP plan and swap-pp's u = 4
        # schedule three times each, interleaved (about 450 s), into results/probes/reproduce/2xH200/TAG-d256/;
        # then the list, with what is left. Keep the vDP schedule in the slim tree (device README item 70)
        P=results/probes/reproduce/2xH200/$T-d256; mkdir -p "$P"
        SCHEDULES=. REPEATS=3 RUN_LIMIT_S=130 HARMONY_DEADLINE=$(( $(date +%s) + 400 )) PLANS="results/paper/2xH200/schedules/vgg416/vDP-N2-D256-auto experiments/device/schedules/vgg416.D256.N2.swap-pp-u4.schedule" \
          bash experiments/device/repeat-plans-2xH200.sh "$P" 2>&1 | tee "$P/console.log"
        pack_probe "$T-d256" "$P"
      fi
      if [ "${ITEM:-63}" = 68 ]; then   # item 68 (entry 109): VGG416-cl D = 16's Harmony plans and swap-pp's
        # u = 4 candidate, 4 runs each, interleaved (about 300 s), into results/probes/reproduce/2xH200/TAG-d16/;
        # then the list, as item 63
        P=results/probes/reproduce/2xH200/$T-d16; mkdir -p "$P"
        SCHEDULES=. REPEATS=4 RUN_LIMIT_S=90 HARMONY_DEADLINE=$(( $(date +%s) + 330 )) PLANS="results/paper/2xH200/schedules/vgg416-cl/vDP-N2-D16-auto results/paper/2xH200/schedules/vgg416-cl/vPP-N2-D16-auto experiments/device/schedules/vgg416-cl.D16.N2.swap-pp-u4.schedule" \
          bash experiments/device/repeat-plans-2xH200.sh "$P" 2>&1 | tee "$P/console.log"
        pack_probe "$T-d16" "$P"
      fi
      if [ "${GPU_TEST:-0}" = 1 ]; then
        mkdir -p "$C"; timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py -k channels_last \
          > "$C/$T.gpu-test.log" 2>&1; echo "gpu test rc=$?"; tail -2 "$C/$T.gpu-test.log"
      fi
      if [ "${HANG_FIX:-0}" = 1 ]; then   # item 66: entry 108's p2p.connect, on the candidate that hung
        H=results/probes/hang/2xH200/$T; mkdir -p "$H"
        timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py -k "channels_last and vPP-2" -rA \
          > "$H/gpu-test.log" 2>&1; echo "gpu test rc=$?"; tail -1 "$H/gpu-test.log"
        ONLY=cl-u8-a RUN_LIMIT_S=100 DEADLINE_S=110 bash experiments/device/hang-check-2xH200.sh "$H" 2>&1 \
          | tee "/tmp/$T-hang.console"
        cp "/tmp/$T-hang.console" "$H/console.log"; tar czf "$OUT/$T-hang.tgz" "$H"
      fi
      if [ "${HANG_CHECK:-0}" = 1 ]; then
        H=results/probes/hang/2xH200/$T
        DEADLINE_S=300 bash experiments/device/hang-check-2xH200.sh "$H" 2>&1 | tee "/tmp/$T-hang.console"
        cp "/tmp/$T-hang.console" "$H/console.log"; tar czf "$OUT/$T-hang.tgz" "$H"
      fi
      BUDGET_S=$((${CALL_BUDGET_S:-585} - SECONDS)) TAIL_S=70 bash experiments/device/grid_gpu.sh experiments/device/jobs-variant-2xH200.sh \
        results/paper/2xH200 "$T"
    else BUDGET_S=585 bash experiments/device/grid_gpu.sh experiments/device/repredicted-fixed-2xH200.sh \
      results/paper/2xH200 "${1:-x2-repredfix1}"; fi ;;
  1xH200*)            # items 49-51 done in the fifty-eighth session (results/probes/runtime-gap/itemN/); items 53-56
    # (ITEM=53 to 56, fifty-ninth session): swap-dp and swap-pp beside Harmony's plans on one GPU (results/probes/runtime-gap/item53/);
    # the default, item 49: Harmony's GPT2-XL D = 16 plans (committed, today's at 10% and at 7% headroom)
    # against swap-pp u = 16 on the H100's profile, today's code, interleaved (about 6 minutes); ITEM=50 and
    # ITEM=51: D = 64 and D = 256, swap-pp at a larger u once, then its best against Harmony's plans (about
    # 7 and 8 minutes); ITEM=42 measures the per-task host charge again
    if [ "${ITEM:-49}" = 42 ]; then host_task "${1:-ht1}"; exit 0; fi
    if [ "${ITEM:-49}" = 77 ]; then   # item 77 (docs/performance.md entry 115): figure 10's committed GPT2-XL D = 16
      # vDP plan, whose joined last pack [49, 52] ran 1.31x its simulated time here (swap-dp's [50, 52] 1.02x),
      # under the compute stream's pool (its default, `auto`) and the copy stream's, A B B A, then one traced
      # iteration under each (about 5 minutes)
      IN=results/paper/1xH200 MODEL=gpt2-xl D=16 U=16 ITERS=6 WARMUP=2 RUN_LIMIT_S=100 DEADLINE=540 runargs_ab \
        "${1:-i77}" results/paper/1xH200/schedules/gpt2-xl/vDP-N1-D16-auto.json "cs-1|" "cp-1|--load-buffers copy-stream" \
        "cp-2|--load-buffers copy-stream" "cs-2|" "cs-tr|--memcpy-trace" "cp-tr|--load-buffers copy-stream --memcpy-trace"
      exit 0
    fi
    if [ "${ITEM:-49}" = 67 ]; then   # item 67: ResNet1026 D = 1024 at N = 1, Harmony and swap-dp, NCHW and channels-last
      T=${1:-n1cl1}; P=results/probes/channels-last/1xH200/$T
      DEADLINE_S=$((560 - SECONDS)) bash experiments/device/n1-variant-probe-1gpu.sh "$P" 2>&1 | tee "/tmp/$T.console"
      n1_probe_done "$T" "$P"; exit 0
    fi
    if [ "${ITEM:-49}" = 72 ]; then   # item 72: the same at D = 256, two rounds of six iterations (entry 112)
      T=${1:-n1cl2}; P=results/probes/channels-last/1xH200/$T
      D=256 ROUNDS=2 ITERS=6 RUN_LIMIT_S=110 DEADLINE_S=$((560 - SECONDS)) \
        bash experiments/device/n1-variant-probe-1gpu.sh "$P" 2>&1 | tee "/tmp/$T.console"
      n1_probe_done "$T" "$P"; exit 0
    fi
    if [ "${ITEM:-49}" = 73 ]; then   # item 73: swap-pp and fsdp-offload beside Harmony at item 72's point (entry 112)
      T=${1:-n1cl3}; P=results/probes/channels-last/1xH200/$T
      { D=256 LAYOUTS="resnet1026-cl resnet1026" BASELINES="swap-pp:256" RUN_LIMIT_S=110 DEADLINE_S=$((560 - SECONDS)) \
          bash experiments/device/n1-variant-probe-1gpu.sh "$P"
        D=256 LAYOUTS=resnet1026-cl HARMONY=0 BASELINES="fsdp-offload:32" ITERS=3 RUN_LIMIT_S=200 DEADLINE_S=$((560 - SECONDS)) \
          bash experiments/device/n1-variant-probe-1gpu.sh "$P"; } 2>&1 | tee "/tmp/$T.console"
      n1_probe_done "$T" "$P"; exit 0
    fi
    if [ "${ITEM:-49}" = 65 ]; then   # item 65: --keep-layout on one GPU, where only stashes cross (entry 108)
      keep_layout "${1:-keep1}" "experiments/device/schedules/resnet1026-cl.D1024.N1.vPP.schedule.json experiments/device/schedules/vgg416-cl.D64.N1.vPP.schedule.json"
      exit 0
    fi
    H=results/paper/1xH100-80GB-HBM3/schedules/gpt2-xl
    if [ "${ITEM:-49}" = 50 ]; then   # item 50 (done, fifty-eighth session): D = 64, swap-pp u = 32 once, then u = 16
      I=results/probes/runtime-gap/item50    # against the committed plan and the 2% one
      point_ab "${1:-i50}" 64 32 16 4 2 "plan=$H/vDP-N1-D64-auto.json h02=$I/gpt2-xl-vPP-N1-D64-headroom0.02.json"; exit 0
    fi
    if [ "${ITEM:-49}" = 51 ]; then   # item 51: D = 256, swap-pp u = 16 once, then u = 8 against Harmony's plan
      point_ab "${1:-i51}" 256 16 8 3 1 "plan=$H/vPP-N1-D256-auto.json"; exit 0
    fi
    if [ "${ITEM:-49}" = 53 ]; then   # item 53: swap-dp (runtime-gap-ab-1gpu.sh reads BASELINE) at D = 16, u = 8
      # once, then u = 16 against the committed plan; then D = 64, u = 32 once, then u = 16 (about 7 minutes)
      export BASELINE=swap-dp
      point_ab "${1:-i53}-d16" 16 8 16 6 2 "plan=$H/vDP-N1-D16-auto.json"
      point_ab "${1:-i53}-d64" 64 32 16 4 2 "plan=$H/vDP-N1-D64-auto.json"; exit 0
    fi
    if [ "${ITEM:-49}" = 55 ]; then   # item 55: is Harmony's loss to swap-dp in i53/i54 the host? swap-pp u = 16 against
      # the committed plan and item 49's 7% plan at D = 16 (two rounds), swap-dp u = 16 once more, then D = 64
      # swap-pp u = 16 against the committed plan, one round (about 6 minutes)
      T=${1:-i55}; I=results/probes/runtime-gap/item49
      ARMS='new=.' HARMONY_ARMS=new U=16 ROUNDS=2 DEADLINE_S=330 SCHEDULES="plan=$H/vDP-N1-D16-auto.json
        h07=$I/gpt2-xl-vPP-N1-D16-headroom0.07.json" \
        bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/d16" > "/tmp/$T.console" 2>&1
      ARMS='new=.' BASELINE=swap-dp U=16 ROUNDS=1 DEADLINE_S=$((400 - SECONDS)) \
        bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/d16-dp" >> "/tmp/$T.console" 2>&1
      ARMS='new=.' HARMONY_ARMS=new D=64 U=16 ITERS=4 WARMUP=2 ROUNDS=1 DEADLINE_S=$((560 - SECONDS)) \
        SCHEDULES="plan=$H/vDP-N1-D64-auto.json" \
        bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/d64" >> "/tmp/$T.console" 2>&1
      pack_ab "$T" 14; exit 0
    fi
    if [ "${ITEM:-49}" = 56 ]; then   # item 56: D = 256 on one GPU, one round: swap-pp u = 16 (item 55 left it out),
      # Harmony's committed plan, swap-dp u = 16 (about 6 minutes; swap-pp's first iteration pins a 104 GiB arena).
      # Done in the fifty-ninth session: its first run had DEADLINE_S=300 with RUN_LIMIT_S=250, so after
      # swap-pp's 139 s Harmony's run could not start; it ran alone in a second call on the same GPU (i56b)
      T=${1:-i56}
      ARMS='new=.' HARMONY_ARMS=new D=256 U=16 ITERS=3 WARMUP=1 ROUNDS=1 RUN_LIMIT_S=200 DEADLINE_S=420 \
        SCHEDULES="plan=$H/vPP-N1-D256-auto.json" \
        bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/pp" > "/tmp/$T.console" 2>&1
      ARMS='new=.' BASELINE=swap-dp D=256 U=16 ITERS=3 WARMUP=1 ROUNDS=1 RUN_LIMIT_S=200 DEADLINE_S=$((560 - SECONDS)) \
        bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/dp" >> "/tmp/$T.console" 2>&1
      pack_ab "$T" 8; exit 0
    fi
    if [ "${ITEM:-49}" = 57 ]; then   # item 57: the H100's other figure-10 points, where today's model says the
      # old swap searches (u capped at 16 or 32, the old runtime) set Harmony's lead; each swap baseline at the u
      # the model picks against Harmony's committed plan, one round (results/probes/runtime-gap/item57/README.md)
      T=${1:-i57a}; S=results/paper/1xH100-80GB-HBM3/schedules
      ab57() {   # SUB MODEL D U BASELINE PLAN ITERS WARMUP RUN_LIMIT_S [HARMONY_ARMS [BASE_ARMS]]
        ARMS='new=.' HARMONY_ARMS=${10-new} BASE_ARMS=${11:-all} MODEL=$2 D=$3 U=$4 BASELINE=$5 ITERS=$7 WARMUP=$8 ROUNDS=1 \
          RUN_LIMIT_S=$9 DEADLINE_S=$((${DEADLINE57_S:-565} - SECONDS)) SCHEDULES="plan=$S/$2/$6.json" \
          bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/$1" >> "/tmp/$T.console" 2>&1
      }
      if [ "$T" = i57b ]; then   # swap-dp where swap-pp needs more host memory than the box has (i57a), and
        # BERT96 D = 64 (about 8 minutes)
        ab57 resnet1026-d1024-dp resnet1026 1024 256 swap-dp vDP-N1-D1024-auto 3 1 220
        ab57 bert96-d64 bert96 64 64 swap-pp vDP-N1-D64-auto 4 2 100
        ab57 vgg416-d64-dp vgg416 64 64 swap-dp vDP-N1-D64-auto 4 2 90 ''
        ab57 resnet1026-d64-dp resnet1026 64 64 swap-dp vPP-N1-D64-auto 4 2 80 ''
      elif [ "$T" = i57c ]; then   # BERT96 D = 256, VGG416 D = 16, and swap-dp at VGG416 at the u whose host
        # stash fits (swap-dp's grows with u; i57b's u = 64 did not fit) (about 8 minutes)
        ab57 bert96-d256 bert96 256 128 swap-pp vPP-N1-D256-auto 3 1 150
        ab57 vgg416-d64-dp32 vgg416 64 32 swap-dp vDP-N1-D64-auto 4 2 80 ''
        ab57 vgg416-d16 vgg416 16 16 swap-pp vDP-N1-D16-auto 4 2 80
        ab57 vgg416-d256-dp32 vgg416 256 32 swap-dp vPP-N1-D256-auto 3 1 130 ''
      elif [ "$T" = i57d ]; then   # Harmony at VGG416 D = 256 beside i57c's swap-dp, and BERT96 D = 16 once
        # more with swap-dp too (about 6 minutes; DEADLINE57_S=400 when less device time is left)
        ab57 vgg416-d256 vgg416 256 32 swap-dp vPP-N1-D256-auto 3 1 170 new none   # Harmony only
        ab57 bert96-d16-r2 bert96 16 16 swap-pp vPP-N1-D16-auto 6 2 80
        ab57 bert96-d16-dp bert96 16 16 swap-dp vPP-N1-D16-auto 6 2 60 ''
      else                       # the short ones (about 6 minutes)
        ab57 resnet1026-d256 resnet1026 256 256 swap-pp vPP-N1-D256-auto 4 2 120
        ab57 resnet1026-d256-dp resnet1026 256 256 swap-dp vPP-N1-D256-auto 4 2 120 ''
        ab57 resnet1026-d64 resnet1026 64 64 swap-pp vPP-N1-D64-auto 4 2 90
        ab57 vgg416-d64 vgg416 64 32 swap-pp vDP-N1-D64-auto 4 2 100
        ab57 bert96-d16 bert96 16 16 swap-pp vPP-N1-D16-auto 6 2 90
      fi
      pack_ab "$T" 30; exit 0
    fi
    if [ "${ITEM:-49}" = 58 ]; then   # item 58 (docs/performance.md entry 90): swap-dp BERT96 at N = 1, D = 8, u = 8, with 2x
      # H200's profile: one GPU's share of the N = 2, D = 16 run, without the all-reduce. Its BWD tasks were
      # issued every 5.45 ms there against the model's 3.23 ms; the records' task_issued say whether they still
      # are with no all-reduce, and whether fewer CPU threads for the optimizer (its steps run beside the issue
      # loop) shorten them (about 4 minutes)
      MODEL=bert96 D=8 U=8 ITERS=6 WARMUP=2 RUN_LIMIT_S=90 DEADLINE=540 threads_ab "${1:-i58}" ''; exit 0
    fi
    if [ "${ITEM:-49}" = 59 ]; then   # item 59 (docs/performance.md entry 91): swap-dp GPT2-XL at N = 1, D = 32, u = 4,
      # with 2x H200's profile: eight groups a pack, so the host adds seven of every eight 123 MB dW into the
      # first, beside the issue loop, as swap-pp's u = 4 candidates did (42-52% over the model); each run
      # traces one iteration for its copy rates (about 5 minutes)
      MODEL=gpt2-xl D=32 U=4 ITERS=5 WARMUP=1 RUN_LIMIT_S=100 DEADLINE=545 threads_ab "${1:-i59}" --memcpy-trace
      exit 0
    fi
    if [ "${ITEM:-49}" = 60 ]; then   # item 60 (docs/performance.md entry 92): item 58's swap-dp BERT96 schedule (N = 1,
      # D = 8, u = 8), each run tracing one iteration (its CPU side by self time: where the BWD task's extra
      # 1.5-2.4 ms go), at the default two update threads and at one, A B B A (about 4 minutes)
      MODEL=bert96 D=8 U=8 ITERS=6 WARMUP=2 RUN_LIMIT_S=100 DEADLINE=540 runargs_ab "${1:-i60}" \
        experiments/device/schedules/bert96.D8.N1.swap-dp-u8.schedule.json "u2-1|--memcpy-trace" \
        "u1-1|--memcpy-trace --update-threads 1" "u1-2|--memcpy-trace --update-threads 1" "u2-2|--memcpy-trace"
      exit 0
    fi
    if [ "${ITEM:-49}" = 62 ]; then   # item 62 (docs/performance.md entry 93): swap-dp's VGG416 and ResNet1026 plans
      # (one GPU's share of figure 10's N = 2 records, written by experiments/swap_schedule.py) traced with CPU
      # activity, one pass each: calls per task against the extra host time per task, beside item 61's BERT96
      # (about 4 minutes; DEADLINE62 bounds the last start when less device time is left)
      T=${1:-i62}; mkdir -p "/tmp/$T"
      for spec in vgg416:vgg416.D8.N1.swap-dp-u8 resnet1026:resnet1026.D128.N1.swap-dp-u128; do
        ARMS='new=.' BASE_ARMS='' HARMONY_ARMS=new RUN_ARGS='--memcpy-trace --trace-host-ops' IN=results/paper/2xH200 \
          MODEL=${spec%%:*} ROUNDS=1 ITERS=5 WARMUP=2 RUN_LIMIT_S=150 DEADLINE_S=$((${DEADLINE62:-540} - SECONDS)) \
          SCHEDULES="plan=experiments/device/schedules/${spec#*:}.schedule.json" \
          bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T/${spec%%:*}" >> "/tmp/$T.console" 2>&1
      done
      pack_ab "$T" 12; exit 0
    fi
    if [ "${ITEM:-49}" = 61 ]; then   # item 61 (docs/performance.md entry 93): item 60's schedule traced with CPU
      # activity too (`--trace-host-ops`), twice: the host's BWD time by torch op and thread, and how much of
      # it no op covers (Python, the runtime's own code); the new GPU test first (about 3 minutes)
      mkdir -p /tmp/${1:-i61}
      timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py -k trace_host_ops \
        > /tmp/${1:-i61}/gpu-test.log 2>&1; echo "gpu test rc=$?"; tail -2 /tmp/${1:-i61}/gpu-test.log
      MODEL=bert96 D=8 U=8 ITERS=6 WARMUP=2 RUN_LIMIT_S=120 DEADLINE=540 runargs_ab "${1:-i61}" \
        experiments/device/schedules/bert96.D8.N1.swap-dp-u8.schedule.json "h-1|--memcpy-trace --trace-host-ops" \
        "h-2|--memcpy-trace --trace-host-ops"
      exit 0
    fi
    if [ "${ITEM:-49}" = 54 ]; then   # item 54: swap-dp u = 16 against the committed plan at D = 256 (about 9 minutes;
      # a run's first iteration pins its host arena, so each run may take 250 s: item 51's 140 s cut them)
      T=${1:-i54}
      ARMS='new=.' HARMONY_ARMS=new BASELINE=swap-dp D=256 U=16 ITERS=3 WARMUP=1 ROUNDS=2 RUN_LIMIT_S=250 \
        DEADLINE_S=560 SCHEDULES="plan=$H/vPP-N1-D256-auto.json" \
        bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T" > "/tmp/$T.console" 2>&1
      pack_ab "$T" 8; exit 0
    fi
    I=results/probes/runtime-gap/item49; T=${1:-i49}
    ARMS='new=.' HARMONY_ARMS=new ROUNDS=2 DEADLINE_S=560 SCHEDULES="plan=results/paper/1xH100-80GB-HBM3/schedules/gpt2-xl/vDP-N1-D16-auto.json
      h10=$I/gpt2-xl-vPP-N1-D16-headroom0.10.json h07=$I/gpt2-xl-vPP-N1-D16-headroom0.07.json" \
      bash experiments/device/runtime-gap-ab-1gpu.sh "/tmp/$T" > "/tmp/$T.console" 2>&1
    pack_ab "$T" 12 ;;
  2xH100-80GB-HBM3)   # item 19: fsdp-offload at NL = 72 on one H100 of the 252 GiB host
    mkdir -p /tmp/large
    CUDA_VISIBLE_DEVICES=0 NL=72 SYSTEMS=fsdp-offload FSDP_UBATCH=32 CALIBRATION=.whl/cal-1xH100.json \
      timeout 570 bash experiments/device/large_gpu.sh /tmp/large > /tmp/large/console.log 2>&1
    tail -5 /tmp/large/console.log; tar czf "$OUT/large72f.tgz" -C /tmp/large . ;;
  4xH200|4xH100-80GB-HBM3)   # item 28's controls and the own-order references, one GPU each, four at a time;
    # the list is generated here first: HW=4xH200 bash experiments/device/make-jobs-convergence-4gpu.sh
    # (and the same for 4xH100-80GB-HBM3), then `slim_tree.sh on 4xH200 4xH100-80GB-HBM3`
    # On 4x H200 the default is item 46 (fifty-sixth session: swap-dp's four again, entry 81, then
    # zero-offload ResNet1026 and VGG416;
    # carry .whl, or grid_gpu.sh leaves the zero-offload jobs out), then ITEM=38.
    # ITEM=38: vDP N = 4 with --ordered-reduce against -s4 (about 6 minutes)
    # ITEM=44 (4x H200, done in the fifty-fifth session, x4-reprofile3): figures 17/18's GPT-2 width 4096
    # profiled again and their five runs made again; its list is written first, moving the old records
    first=28; [ "$HW" = 4xH200 ] && first=46
    if [ "${ITEM:-$first}" = 46 ]; then   # item 46: figure 10's missing baselines at N = 4 (several calls)
      BUDGET_S=585 TAIL_S=70 bash experiments/device/grid_gpu.sh experiments/device/jobs-baselines-4xH200.sh \
        "results/paper/$HW" "${1:-x4-base1}"
    elif [ "${ITEM:-$first}" = 44 ]; then
      if ! grep -q -- "-o results/paper/$HW/profiles/gpt2-4096x12.json " experiments/device/jobs-samehost-4xH200.sh; then
        echo "jobs-samehost-4xH200.sh has no gpt2-4096x12 profile job: write it first (device README, item 44)"; exit 2
      fi
      BUDGET_S=585 TAIL_S=70 bash experiments/device/grid_gpu.sh experiments/device/jobs-samehost-4xH200.sh \
        "results/paper/$HW" "${1:-x4-reprofile3}"
    elif [ "${ITEM:-$first}" = 38 ]; then
      mkdir -p /tmp/ord; STEP_S=240 timeout 480 bash experiments/device/ordered-reduce-4gpu.sh "results/paper/$HW" /tmp/ord \
        > /tmp/ord/console.log 2>&1; tail -4 /tmp/ord/console.log
      timeout 80 python3 -m pytest -q tests/test_runtime_gpu.py -k ordered_reduce > /tmp/ord/gputest.txt 2>&1
      tail -1 /tmp/ord/gputest.txt; tar czf "$OUT/ord.tgz" -C /tmp ord
    else
      GPU_SLOTS=4 GPU_PARALLEL_RE='convergence/.*-N1\.jsonl$' BUDGET_S=585 bash experiments/device/grid_gpu.sh \
        "experiments/device/jobs-convergence-$HW.sh" "results/paper/$HW" "${1:-x4-conv1}"
    fi ;;
  1xH100-80GB-HBM3)   # item 47 by default (its list is written: GPT2-XL's swap searches, entry 82); ITEM=42: the
    # per-task host charge on this host; ITEM=39: bert96's N = 1 row profiled, searched and run on one host. Its
    # list is written on the CPU machine first, moving the old records: bash
    # experiments/device/make-jobs-samehost.sh --move bert96=pre-seed-dropout (then `slim_tree.sh on 1xH100-80GB-HBM3`)
    if [ "${ITEM:-47}" = 42 ]; then host_task "${1:-ht1}"; exit 0; fi
    if [ "${ITEM:-47}" = 47 ]; then runtime_rerun "${1:-$(unused_tag h100-rtrerun)}"; exit 0; fi
    if [ "${ITEM:-47}" = 69 ]; then   # item 69 (entry 110): the five baseline records that left a smaller u untried
      # (swap-pp VGG416 D = 64 and 256 and ResNet1026 D = 1024, fsdp- and zero-offload VGG416 D = 64), jobs-records-1xH100.sh
      BUDGET_S=585 TAIL_S=70 bash experiments/device/grid_gpu.sh experiments/device/jobs-records-1xH100.sh \
        results/paper/1xH100-80GB-HBM3 "${1:-$(unused_tag h100-rec)}"; exit 0
    fi
    if ! grep -q -- "--out results/paper/1xH100-80GB-HBM3/profiles/bert96.json " experiments/device/jobs-samehost-1xH100.sh; then
      echo "jobs-samehost-1xH100.sh has no bert96 profile job: write it first (device README, item 39)"; exit 2
    fi
    BUDGET_S=585 TAIL_S=70 bash experiments/device/grid_gpu.sh experiments/device/jobs-samehost-1xH100.sh \
      results/paper/1xH100-80GB-HBM3 "${1:-h100-samehost15}" ;;
  *) echo "nothing queued for $HW (device README, \"Next call\")" ;;
esac
