#!/usr/bin/env bash
# A job list that makes the given figure records again as the workflow makes them (each record's file must be
# absent: moved aside under superseded/ first), in the order given. Device README item 69: the swap-pp
# searches that docs/performance.md entry 110 superseded, because they had stopped at a u infeasible for
# host memory while a smaller u fits.
#   usage: HW=2xH200 NGPU=2 [OUT=FILE] bash experiments/device/make-jobs-records.sh RECORD...
#   writes experiments/device/jobs-records-<HW up to its first '-'>.sh, or OUT. Run here, where snakemake is.
set -euo pipefail
: "${HW:?set HW, e.g. HW=2xH200}"; : "${NGPU:?set NGPU, the GPUs of the machine that will run the list}"
CONF=(scale=paper hardware=$HW gpus_present=$NGPU iters=4)
[ $# -gt 0 ] || { sed -n 2,7p "$0" >&2; exit 2; }
for f in "$@"; do [ ! -e "$f" ] || { echo "$0: $f exists: move it aside first, or it is not made again" >&2; exit 2; }; done
source "$(dirname "$0")/joblist_lib.sh"
for f in "$@"; do listing -- "$f"; done     # one listing each: the list keeps the order given
out=${OUT:-experiments/device/jobs-records-${HW%%-*}.sh}
write_joblist "$out"
for f in "$@"; do grep -qF -- "--out $f " "$out" || { echo "$0: $out has no job for $f" >&2; exit 1; }; done
echo "$out: a job for each of the $# record(s)"
