#!/usr/bin/env bash
# Writes experiments/device/jobs-4xH200.sh: issue 9's runs on 4x H200 (figure 10 at N = 4, figures 17/18
# at N = 1, 2, 4) as one job list in priority order, for a device budget that cannot hold the whole grids
# (figure 10 alone is 118 jobs). Run here, where snakemake is; commit the job list it writes.
#   priority: 0 every profile (one per GPU, side by side)  1 Harmony vPP/vDP, figure 10's middle D
#             2 swap-dp there (u = the N = 1 search's best)  3 figures 17/18, 1.6 B and 2.8 B
#             4 fsdp-offload, GPT2-XL  5 figures 17/18, 4.0 B and 5.3 B  6 the rest of figure 10's Harmony grid
# Every run takes 4 iterations (1 warm-up), not the paper scale's 10: `--config iters=4`.
HW=4xH200; CONF=(scale=paper hardware=$HW gpus_present=4 iters=4)
source "$(dirname "$0")/joblist_lib.sh"
FIG10=("gpt2-xl 64" "bert96 64" "vgg416 64" "resnet1026 256")
SCALING=(gpt2-4096x6 gpt2-4096x12 gpt2-4096x18 gpt2-4096x24)
t=(); for m in gpt2-xl bert96 vgg416 resnet1026 "${SCALING[@]}"; do t+=("$R/profiles/$m.json"); done
listing -- "${t[@]}"
t=(); for md in "${FIG10[@]}"; do set -- $md; for s in vPP vDP; do t+=("$R/runs/harmony-$s/$1/N4-D$2-auto.jsonl"); done; done
listing -- "${t[@]}"
# swap-dp's microbatch: the best of its N = 1 search on the H100 (results/paper/1xH100-80GB-HBM3/runs/swap-dp)
for mdu in "gpt2-xl 64 8" "bert96 64 16" "vgg416 64 16" "resnet1026 256 32"; do set -- $mdu
  listing baseline_ubatch=$3 -- "$R/runs/swap-dp/$1/N4-D$2-best.jsonl"; done
scaling() { local t=() m; for m in "$@"; do
  t+=("$R/runs/harmony-vDP/$m/N4-D32-u1-1-p2.jsonl" "$R/runs/harmony-vPP/$m/N4-D32-u1-1-p2.jsonl"
      "$R/runs/harmony-vDP/$m/N1-D32-u1-1-p2.jsonl" "$R/runs/harmony-vDP/$m/N2-D32-u1-1-p2.jsonl"
      "$R/runs/harmony-vPP/$m/N2-D32-u1-1-p2.jsonl"); done; listing -- "${t[@]}"; }
scaling gpt2-4096x6 gpt2-4096x12
listing baseline_ubatch=8 -- "$R/runs/fsdp-offload/gpt2-xl/N4-D64-best.jsonl"
scaling gpt2-4096x18 gpt2-4096x24
listing -- figure10
write_joblist experiments/device/jobs-4xH200.sh
