#!/usr/bin/env bash
# docs/performance.md entry 46: traced on 2x H200 (x2-vppgap1), vPP at N = 2 computes 12-16% longer than
# the profile says (gpt2-xl D = 256: 13.04 s against 11.30 modelled; resnet1026 D = 1024: 5.59 against
# 5.00), while NCCL's SendRecv kernels sit on each GPU for 68-99% of the iteration (a send waits on the GPU
# until its receiver posts the receive, which it does just before it needs the data). vDP at N = 2 has no
# send/recv and meets its prediction (1.03-1.04x). The reading to test: each resident NCCL kernel holds one
# thread block per channel, and those SMs are taken from the compute kernels. This A/B caps the blocks in two
# ways, on the same plans: `harmony run --p2p-max-ctas 2` (the channels' process groups get an NCCL config
# with max_ctas = 2: what the runtime would use, leaving other groups alone) and the environment
# (NCCL_MAX_NCHANNELS, its newer name NCCL_MAX_CTAS, and NCCL_MAX_P2P_NCHANNELS, which NCCL's source reads
# for send/recv; every group). resnet1026 vPP D = 1024 and gpt2-xl vPP D = 256 run default and option,
# then resnet1026 the environment and default again, so that a drift of the host shows. The first default run logs
# NCCL's channel set-up (NCCL_DEBUG=INFO, INIT), to say how many channels it had. Into
# RESULTS/remeasure/nccl-channels/, the figure records untouched. Each run traces one iteration (not timed;
# 2 timed after it), and its timeline says how the same kernels ran with and without NCCL resident
# (`beside_nccl`). About 9 minutes.
#   BUDGET_S=585 TAIL_S=20 bash experiments/device/grid_gpu.sh experiments/device/nccl-channels-ab-2xH200.sh \
#       results/paper/2xH200 x2-ncclab1
# Re-runnable: a finished run is skipped.
set -u
source "$(dirname "$0")/run_lib.sh"
R=${RESULTS_DIR:-results/paper/2xH200}; A=$R/remeasure/nccl-channels
mkdir -p "$A"
export RUN_TIMEOUT_S=200
# first, that the option changes no number (tests/test_runtime_gpu.py, 2 GPUs, about 30 s)
[ -s "$A/pytest-capping.log" ] || { timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_runtime_gpu.py \
    -k capping > "$A/pytest-capping.log" 2>&1; tail -1 "$A/pytest-capping.log"; }
CAP=${NCCL_CAP:-2}
# the comparisons that decide first (about 7 minutes), then the environment arm and the second default
for run in "resnet1026 1024 default-a" "resnet1026 1024 opt$CAP" "gpt2-xl 256 default-a" "gpt2-xl 256 opt$CAP" \
           "resnet1026 1024 env$CAP" "resnet1026 1024 default-b"; do
    set -- $run; m=$1 d=$2 arm=$3
    env_="" opt=""
    case $arm in
      default-a) env_="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT" ;;
      opt*)      opt="--p2p-max-ctas $CAP" ;;
      env*)      env_="NCCL_MAX_NCHANNELS=$CAP NCCL_MAX_CTAS=$CAP NCCL_MAX_P2P_NCHANNELS=$CAP" ;;
    esac
    out=$A/$m-vPP-N2-D$d-$arm.jsonl
    RUN_ENV="$env_" one_run "$out" "$m vPP N=2 D=$d, $arm ${env_}${opt}" \
        "$R/schedules/$m/vPP-N2-D$d-auto.json" --iters 5 --memcpy-trace $opt
    # the traced iteration's `beside_nccl`: the same kernels with and without NCCL resident (harmony.timeline)
    [ -s "$out" ] && python3 -m harmony.cli timeline "$out" > "${out%.jsonl}.timeline.txt" 2>&1 \
        && grep -h "beside a resident" "${out%.jsonl}.timeline.txt"
done
grep -h -i "channel" "$A"/*default-a.log 2>/dev/null | sort | uniq -c | sort -rn | head -8
summarize_runs "$A"
