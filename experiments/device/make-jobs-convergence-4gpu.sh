#!/usr/bin/env bash
# Writes experiments/device/jobs-convergence-<HW>.sh: issue 8's convergence figures (13 and 21) on a
# four-GPU machine, whose curves at N = 4 a two-GPU machine shows as unavailable (device README item 17).
# One list per kind the tool may lend for a four-GPU call; run here, where snakemake is, right before the
# call (the device tool carries untracked files; the list is generated, so it is not committed).
#   HW=4xH200 bash experiments/device/make-jobs-convergence-4gpu.sh             (nvidia-h200-x4)
#   HW=4xH100-80GB-HBM3 bash experiments/device/make-jobs-convergence-4gpu.sh   (nvidia-h100-x4)
# The list holds each figure whole in its own folder (models, profiles, calibration, the PyTorch reference,
# Harmony's curves at N = 1, 2 and 4): the figure compares curves of one machine only.
#   priority: 0 figure 13 (BERT-Large on MRPC, 300 iterations a curve: about 6.5 minutes on 2x H200)
#             1 figure 21 (GPT-2 medium fine-tuning, 20 iterations a curve, as on 2x H200: its curves at
#               N = 1 take 2-3 minutes each there)
# The device then runs it with grid_gpu.sh, one call after another, unpacking each (README item 17).
HW=${HW:?set HW to the four-GPU results folder, e.g. HW=4xH200 or HW=4xH100-80GB-HBM3}
case $HW in 4x*) ;; *) echo "$0: HW=$HW is not a four-GPU folder (4x...)" >&2; exit 2 ;; esac
CONF=(scale=paper hardware=$HW gpus_present=4)
source "$(dirname "$0")/joblist_lib.sh"
listing -- figure13
listing convergence_iters=20 -- figure21
out=experiments/device/jobs-convergence-$HW.sh
write_joblist "$out"
echo "wrote $out: $(grep -c '^job ' "$out") jobs" >&2
