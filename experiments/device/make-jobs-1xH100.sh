#!/usr/bin/env bash
# Writes experiments/device/jobs-1xH100.sh: issue 8's remaining one-GPU runs on nvidia-h100-x1 (figure 10's
# baselines, figures 17/18 and 8 at N = 1, then the rest of figure 10), one job list in priority order.
# Run here, where snakemake is, after the schedules it can make on the CPU are made (they need no GPU):
#   snakemake --cores 2 --until schedule --config scale=paper hardware=1xH100-80GB-HBM3 gpus_present=1 -- figure10 figure12
#   priority: 0 the profiles figures 17/18 and 8 need      1 figure 10's baselines at its middle D but zero-offload
#             2 figures 17/18 at N = 1 (vDP; vPP is the same plan on one GPU)   3 figure 8
#             4 zero-offload at figure 10's middle D (about 4 minutes each: 110 s of setup, 20-50 s iterations)
#             5 figure 10's smallest D but zero-offload (short runs: most grid points per call)
#             6 the rest of figure 10
#             last: zero-offload resnet1026 at every D (a call of its own each: at D=64, u=8 took 400 s with
#             44 s iterations, h100-call10; at D=256, u=16 was still in its first iteration 250 s in). Their
#             microbatch searches resume from the candidates already on record.
# Every run takes 4 iterations (1 warm-up), not the paper scale's 10: `--config iters=4`. Baselines take the
# microbatch of the N = 1 searches already on record (swap-dp's best, results/paper/1xH100-80GB-HBM3/runs):
# swap-pp and fsdp-offload that u; zero-offload, whose GPU footprint is larger, half of it (bert96 at
# u = 8 already flushed its allocator cache under the 11 GiB cap; u = 16 would not fit). resident, the
# no-swap ceiling C10 compares with, searches its own u (thirteenth session: the records that ran swap-dp's
# u are in superseded/resident-one-u/); it goes first, with gpt2-xl's at D = 64.
HW=1xH100-80GB-HBM3; CONF=(scale=paper hardware=$HW gpus_present=1 iters=4)
source "$(dirname "$0")/joblist_lib.sh"
# First: fsdp-offload vgg416 D = 256. Its u = 4 ran 127 s iterations (u = 8/16 OOM, on record); with
# --max-iter-s it stops after its first steady-state iteration, about 5 minutes, so a call starts with it.
listing -- "$R/runs/fsdp-offload/vgg416/N1-D256-best.jsonl"
t=(); for md in bert96/N1-D64 gpt2-xl/N1-D64 vgg416/N1-D64 resnet1026/N1-D256; do t+=("$R/runs/resident/$md-best.jsonl"); done
listing -- "${t[@]}"
listing -- "$R/profiles/gpt2-4096x6.json" "$R/profiles/gpt2-4096x12.json" "$R/profiles/bert-large-nodrop.json" \
           "$R/profiles/gpt2-4096x18.json" "$R/profiles/gpt2-4096x24.json"
for mdu in "bert96 64 16" "vgg416 64 16" "resnet1026 256 32"; do set -- $mdu
  for sys in swap-pp fsdp-offload; do listing baseline_ubatch=$3 -- "$R/runs/$sys/$1/N1-D$2-best.jsonl"; done
done
t=(); for m in gpt2-4096x6 gpt2-4096x12 gpt2-4096x18 gpt2-4096x24; do t+=("$R/runs/harmony-vDP/$m/N1-D32-u1-1-p2.jsonl"); done
listing -- "${t[@]}"
listing -- figure8
for mdu in "bert96 64 8" "vgg416 64 8" "resnet1026 256 16"; do set -- $mdu
  listing baseline_ubatch=$3 -- "$R/runs/zero-offload/$1/N1-D$2-best.jsonl"; done
t=(); for m in gpt2-xl bert96 vgg416; do for sys in swap-pp fsdp-offload resident; do t+=("$R/runs/$sys/$m/N1-D16-best.jsonl"); done; done
listing -- "${t[@]}" "$R/runs/harmony-vDP/bert96/N1-D16-auto.jsonl"
listing -- figure10 figure12
zr=$R/runs/zero-offload/resnet1026
# Last too: Harmony points whose schedule is the same task graph as the other mode's, already run (the
# figures show that run for them: harmony.figures._one_gpu_twins); running them only confirms it.
twins="$R/runs/harmony-vDP/bert96/N1-D64-auto.jsonl,$R/runs/harmony-vPP/gpt2-xl/N1-D256-auto.jsonl"
twins="$twins,$R/runs/harmony-vPP/resnet1026/N1-D1024-auto.jsonl"
write_joblist experiments/device/jobs-1xH100.sh \
  --defer "$twins,$zr/N1-D64-best.jsonl,$zr/N1-D256-best.jsonl,$zr/N1-D1024-best.jsonl"
