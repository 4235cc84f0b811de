#!/usr/bin/env bash
# The device tool copies the working tree and refuses one over 64 MiB; with the committed results it is
# about 59 MiB (experiments/device/tree_size.py), so DeepSpeed's wheels (`carry: [".whl"]`, 4.9 MiB) no
# longer fit. Device calls read nothing under a results folder's superseded/ (records replaced by later
# runs, kept as evidence) or the 4x H200 results, so this leaves them out of the working tree with a sparse
# checkout: git keeps them (committed, in the index, in every clone), they are only not on disk here.
#   bash experiments/device/slim_tree.sh on     before device calls (about 50 MiB left)
#   bash experiments/device/slim_tree.sh off    before moving records into superseded/ (make-jobs-samehost.sh
#                                               --move) or reading them; git refuses to add paths outside a
#                                               sparse checkout
set -euo pipefail
#   SLIM_ALSO='results/large/ results/paper/2xH200/runs/swap-pp/' bash experiments/device/slim_tree.sh on HW
#                                               also leaves out those folders (repository-relative, trailing
#                                               slash), for a call whose job list reads none of them: the
#                                               2x H200 tree alone had grown to 63.8 MiB by the fifty-second
#                                               session, too close to the tool's limit
#   SLIM_KEEP='results/paper/2xH200/runs/*/*-cl/' ... slim_tree.sh on HW   takes those back in after SLIM_ALSO
#   bash experiments/device/slim_tree.sh on HW [HW...]  also leaves out every results/paper/ folder but HW (e.g.
#                                               2xH200; name two for a call that may get either card):
#                                               a call's job list reads only its own hardware's folder, and
#                                               the tree with all of them had grown to 60 MiB by the
#                                               twenty-eighth session
case ${1:-} in
  on)  if [ -n "${2:-}" ]; then
         keep=()
         for hw in "${@:2}"; do
           [ -d "results/paper/$hw" ] || { echo "$0: no folder results/paper/$hw (one of: $(ls results/paper | tr '\n' ' '))" >&2; exit 2; }
           keep+=("/results/paper/$hw/" "!/results/paper/$hw/superseded/")
         done
         for extra in ${SLIM_ALSO:-}; do keep+=("!/${extra#/}"); done
         # SLIM_KEEP: patterns taken back in after SLIM_ALSO, e.g. a variant's committed records inside a
         # left-out runs/ folder (device README item 63: 'results/paper/2xH200/runs/*/*-cl/'), which a job
         # list would otherwise make again
         for back in ${SLIM_KEEP:-}; do keep+=("/${back#/}"); done
         git sparse-checkout set --no-cone '/*' '!/results/paper/*/' "${keep[@]}"
       else
         git sparse-checkout set --no-cone '/*' '!/results/paper/*/superseded/' '!/results/paper/4xH200/'
       fi ;;
  off) git sparse-checkout disable ;;
  *)   echo "usage: $0 on [HW...]|off" >&2; exit 2 ;;
esac
python3 experiments/device/tree_size.py --carry .whl --top 3 | tail -1 || true    # the size with the wheels carried
