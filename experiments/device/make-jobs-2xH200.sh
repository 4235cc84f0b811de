#!/usr/bin/env bash
# Writes experiments/device/jobs-2xH200.sh (with HW=2xH100-80GB-HBM3: jobs-2xH100.sh, below): issue 8's
# runs on nvidia-h200-x2 (N = 2), one job list in priority order, for device budgets that cannot hold the
# whole grids. Run here, where snakemake is.
#   priority: 0 plain PyTorch at other microbatches beside figures 13 and 21's references (check C6's
#               controls: how far rounding alone carries the reference), then figure 21 at N = 2
#             1 the figure-10 profiles, one at a time      2 Harmony vPP/vDP at figure 10's middle D
#             3 swap-dp there (u = the best of its N = 1 search on the H100)
#             4 figures 17/18 at N = 1, 2 for 1.6 B and 2.8 B
#             5 Harmony vPP/vDP at figure 10's other D (schedules committed: a minute or two each), then
#               figures 17/18's 4.0 B and 5.3 B GPT-2 (profiles, vDP at N = 1 and 2, vPP at N = 2; their
#               N = 4 and 8 points are schedules, predictions), and figure 8 (one profile, five runs)
#             6 the other baselines at the middle D, then at the smallest D, then at the largest, then
#               zero-offload at every D: cheap points first (x2-grid1 ran two zero-offload searches in a
#               whole call; resident gpt2-xl D = 256's search alone took 293 s)
#             7 the rest of figure 10 (what 5 and 6 do not name; nothing, unless the grid grows)
# Every throughput run takes 4 iterations (1 warm-up): `--config iters=4`; figure 21 keeps its 20.
# HW=2xH100-80GB-HBM3 (the cards the tool lends `nvidia-h200-x2` calls when H200s do not come) writes
# jobs-2xH100.sh instead: figure 10 only (priorities 1, 2, 3, 5's Harmony runs, 6 and 7), into that folder.
HW=${HW:-2xH200}; FIGURE10_ONLY=0; [ "$HW" = 2xH200 ] || FIGURE10_ONLY=1
CONF=(scale=paper hardware=$HW gpus_present=2 iters=4 convergence_iters=20
      baseline_ubatch_start_from=results/paper/1xH100-80GB-HBM3)   # each search climbs from the H100's best u
source "$(dirname "$0")/joblist_lib.sh"
C13=$R/convergence/figure13/bert-large-mrpc; C21=$R/convergence/figure21/gpt2-medium-ft
[ $FIGURE10_ONLY = 1 ] || listing convergence_iters=300 -- "$C13/pytorch-reorder-N1.jsonl" \
           "$C13/pytorch-reorder-u4-N1.jsonl" "$C13/pytorch-reorder-u32-N1.jsonl"
[ $FIGURE10_ONLY = 1 ] || listing -- "$C21/pytorch-reorder-N1.jsonl" "$C21/pytorch-reorder-u1-N1.jsonl" \
           "$C21/pytorch-reorder-u8-N1.jsonl"
[ $FIGURE10_ONLY = 1 ] || listing -- "$R/convergence/figure21/gpt2-medium-ft/harmony-vPP-N2.jsonl" \
           "$R/convergence/figure21/gpt2-medium-ft/harmony-vDP-N2.jsonl"
# every curve of figures 13 and 21 (device README item 24: after their old records move to superseded/, the
# whole figure again on one commit; nothing here while they are on record)
[ $FIGURE10_ONLY = 1 ] || listing convergence_iters=300 -- figure13
[ $FIGURE10_ONLY = 1 ] || listing -- figure21
FIG10=("bert96 64 16" "vgg416 64 16" "resnet1026 256 32" "gpt2-xl 64 8")
t=(); for mdu in "${FIG10[@]}"; do set -- $mdu; t+=("$R/profiles/$1.json"); done
listing -- "${t[@]}"
t=(); for mdu in "${FIG10[@]}"; do set -- $mdu; for s in vPP vDP; do t+=("$R/runs/harmony-$s/$1/N2-D$2-auto.jsonl"); done; done
listing -- "${t[@]}"
for mdu in "${FIG10[@]}"; do set -- $mdu; listing baseline_ubatch=$3 -- "$R/runs/swap-dp/$1/N2-D$2-best.jsonl"; done
t=(); for m in gpt2-4096x6 gpt2-4096x12; do for n in 1 2; do for s in vDP vPP; do
  [ "$n$s" = 1vPP ] || t+=("$R/runs/harmony-$s/$m/N$n-D32-u1-1-p2.jsonl"); done; done; done
[ $FIGURE10_ONLY = 1 ] || listing -- "${t[@]}"
t=(); for mds in "bert96 16 256" "vgg416 16 256" "resnet1026 64 1024" "gpt2-xl 16 256"; do set -- $mds
  for d in $2 $3; do for s in vPP vDP; do t+=("$R/runs/harmony-$s/$1/N2-D$d-auto.jsonl"); done; done; done
listing -- "${t[@]}"
t=(); for m in gpt2-4096x18 gpt2-4096x24; do for n in 1 2; do for s in vDP vPP; do
  [ "$n$s" = 1vPP ] || t+=("$R/runs/harmony-$s/$m/N$n-D32-u1-1-p2.jsonl"); done; done; done
if [ $FIGURE10_ONLY = 0 ]; then
  listing -- "${t[@]}"
  listing -- figure17 figure18
  listing -- figure8          # BERT-Large D = 600: its profile, the searched and four hand-set plans at N = 2
fi
# D per model: middle, smallest, largest (figure 10's grid, Snakefile)
GRID=("bert96 64 16 256" "vgg416 64 16 256" "resnet1026 256 64 1024" "gpt2-xl 64 16 256")
for k in 2 3 4; do t=(); for g in "${GRID[@]}"; do set -- $g; d=${!k}
  for s in resident swap-dp swap-pp fsdp-offload; do
    if [ $s = resident ]; then t+=("$R/runs/resident/$1/N1-D$d-best.jsonl"); else t+=("$R/runs/$s/$1/N2-D$d-best.jsonl"); fi
  done; done; listing -- "${t[@]}"; done
for k in 2 3 4; do t=(); for g in "${GRID[@]}"; do set -- $g; t+=("$R/runs/zero-offload/$1/N2-D${!k}-best.jsonl"); done
  listing -- "${t[@]}"; done
listing -- figure10
write_joblist "experiments/device/jobs-${HW%%-*}.sh"
