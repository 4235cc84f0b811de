#!/usr/bin/env bash
# Writes experiments/device/jobs-1xH200.sh: figure 10 at N = 1 on one H200 (device README item 76), in an
# order that finishes whole configurations one after another, since a one-H200 session gets about three
# calls and the list takes many sessions (pending_jobs.py: about 13,700 s for the jobs it can estimate).
# Run here, where snakemake is:  bash experiments/device/make-jobs-1xH200.sh
#   per model (vgg416, gpt2-xl, bert96, resnet1026, cheapest first by the H100's searches):
#     1 its profile, its N = 1 schedules and its six Harmony runs, on one host (entry 31: a profile from the
#       run's own host predicts the run; host issue times differ between lent hosts)
#     2 its baselines minibatch by minibatch: swap-dp, swap-pp, fsdp-offload, zero-offload, resident, so
#       each configuration's baselines run beside each other
#   last: the N = 4 schedules figure 10 predicts from (CPU only: make them here with `snakemake --until
#   schedule` once the profiles are back, and the device list skips them).
# Every run takes 4 iterations (1 warm-up), as on 1x H100 and 2x H200: `--config iters=4`.
HW=1xH200; CONF=(scale=paper hardware=$HW gpus_present=1 iters=4)
source "$(dirname "$0")/joblist_lib.sh"
declare -A DS=([vgg416]="16 64 256" [gpt2-xl]="16 64 256" [bert96]="16 64 256" [resnet1026]="64 256 1024")
for m in vgg416 gpt2-xl bert96 resnet1026; do
  t=(); for d in ${DS[$m]}; do for mode in vDP vPP; do t+=("$R/runs/harmony-$mode/$m/N1-D$d-auto.jsonl"); done; done
  listing -- "${t[@]}"
  for d in ${DS[$m]}; do
    t=(); for sys in swap-dp swap-pp fsdp-offload zero-offload resident; do t+=("$R/runs/$sys/$m/N1-D$d-best.jsonl"); done
    listing -- "${t[@]}"
  done
done
listing -- figure10
write_joblist experiments/device/jobs-1xH200.sh
