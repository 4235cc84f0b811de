#!/usr/bin/env bash
# Writes experiments/device/jobs-baselines-4xH200.sh: device README item 46, the baselines figure 10's
# middle-D configurations lack at N = 4 on 4x H200. Until they run, `harmony check` calls C3 and C10 there
# `incomplete`. swap-dp is among them again since the fifty-sixth session: its records there were made on
# 2026-11-22 (commit 1f405ab1, the H100's u, no search, two timed iterations), on the runtime of six days
# and dozens of changes before Harmony's N = 4 runs, which it shares; they are in
# superseded/swap-dp-first-runtime/. Cheap systems first; each baseline searches its microbatch (powers
# of two up to D/N), and a search cut by a call's end goes on from its candidates on record in the next call.
# Run here, where snakemake is; commit the job list it writes.
HW=4xH200; CONF=(scale=paper hardware=$HW gpus_present=4 iters=4)
source "$(dirname "$0")/joblist_lib.sh"
FIG10=("gpt2-xl 64" "bert96 64" "vgg416 64" "resnet1026 256")
for system in swap-pp fsdp-offload swap-dp zero-offload; do
  t=(); for md in "${FIG10[@]}"; do set -- $md; t+=("$R/runs/$system/$1/N4-D$2-best.jsonl"); done
  listing -- "${t[@]}"
done
write_joblist experiments/device/jobs-baselines-4xH200.sh
