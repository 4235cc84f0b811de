# Sourced by experiments/device/make-jobs-*.sh: build one device job list from several Snakemake dry-run
# listings, in priority order (python -m harmony.workflow joblist keeps a job listed twice once).
#   HW=... CONF=(scale=paper hardware=$HW gpus_present=N iters=4); source this file
#   listing [CONFIG...] -- TARGET...     one dry-run listing (CONFIG: extra --config items for it alone)
#   write_joblist OUT [JOBLIST-OPTION...]  the job list, figures left to the CPU machine (e.g. --defer OUTPUTS)
set -euo pipefail
R=results/paper/$HW
JOBLIST_TMP=$(mktemp -d); trap 'rm -rf "$JOBLIST_TMP"' EXIT
n_listing=0
listing() {
  local conf=(); while [ "$1" != "--" ]; do conf+=("$1"); shift; done; shift
  n_listing=$((n_listing+1))
  snakemake -n -p --nolock "$@" --config "${CONF[@]}" "${conf[@]}" \
      > "$JOBLIST_TMP/$(printf %02d $n_listing).txt" 2>/dev/null \
    || { echo "snakemake -n failed for: $*" >&2; exit 1; }
}
write_joblist() {
  python -m harmony.workflow joblist "$JOBLIST_TMP"/*.txt --skip-rules figure -o "$1" "${@:2}"
}
