#!/usr/bin/env bash
# Device README item 63: a model's figure-10 records made again for a variant of it, an alias in
# experiments/scales.yaml's `models:` (resnet1026-cl: resnet1026 with channels-last activations). The
# variant has its own id, so its profile, plans and records sit beside the base's and figure 10 keeps the
# base until every system has run the variant at every point; a device call runs what its budget holds
# and the next call goes on from there (grid_gpu.sh skips records that exist).
#   usage: HW=2xH200 NGPU=2 bash experiments/device/make-jobs-variant.sh ITEM...
#   ITEM:  BASE=VARIANT:SYSTEM[,SYSTEM...][@D[,D...]]   SYSTEM: harmony (both modes' searched plans),
#          swap-dp, swap-pp, fsdp-offload, zero-offload or resident; @D: only those minibatches, for
#          every system of the item (one item per different set of D)
#   e.g.   resnet1026=resnet1026-cl:harmony resnet1026=resnet1026-cl:swap-dp@1024
# For each ITEM, in order, the list holds every record BASE has for those systems (any N, as the base's
# folder holds them: resident's are N = 1), under VARIANT's name; the variant's decompose and profile come
# with its first item. Writes experiments/device/jobs-variant-<HW up to its first '-'>.sh, or OUT.
set -euo pipefail
: "${HW:?set HW, e.g. HW=2xH200}"; : "${NGPU:?set NGPU, the GPUs of the machine that will run the list}"
CONF=(scale=paper hardware=$HW gpus_present=$NGPU iters=4)
[ $# -gt 0 ] || { sed -n 2,14p "$0" >&2; exit 2; }
source "$(dirname "$0")/joblist_lib.sh"
wanted=()
for item in "$@"; do
  case $item in *=*:*) ;; *) echo "$0: '$item' is not BASE=VARIANT:SYSTEM[,SYSTEM...][@D,...]" >&2; exit 2 ;; esac
  base=${item%%=*}; rest=${item#*=}; variant=${rest%%:*}; systems=${rest#*:}; ds=""
  case $systems in *@*) ds=${systems#*@}; ds=${ds//,/ }; systems=${systems%%@*} ;; esac
  python3 -c 'import sys, yaml; a = yaml.safe_load(open("experiments/scales.yaml"))["models"].get(sys.argv[1]) or {}
sys.exit(a.get("base") != sys.argv[2])' "$variant" "$base" \
    || { echo "$0: experiments/scales.yaml's models: has no '$variant: {base: $base, ...}' alias" >&2; exit 2; }
  t=()
  for system in ${systems//,/ }; do
    case $system in
      harmony) folders="harmony-vDP harmony-vPP"; cfg=auto ;;
      swap-dp|swap-pp|fsdp-offload|zero-offload|resident) folders=$system; cfg=best ;;
      *) echo "$0: SYSTEM '$system' is not one of harmony swap-dp swap-pp fsdp-offload zero-offload resident" >&2; exit 2 ;;
    esac
    for folder in $folders; do
      for f in "$R/runs/$folder/$base"/N*-D*-$cfg.jsonl; do
        [ -e "$f" ] || continue
        name=${f##*/}; d=${name#*-D}; d=${d%%-*}
        [ -z "$ds" ] || case " $ds " in *" $d "*) ;; *) continue ;; esac
        t+=("$R/runs/$folder/$variant/$name")
      done
    done
  done
  [ ${#t[@]} -gt 0 ] || { echo "$0: $item: $R/runs has no record of $base for those systems" >&2; exit 2; }
  listing -- "${t[@]}"
  wanted+=("${t[@]}")
done
out=${OUT:-experiments/device/jobs-variant-${HW%%-*}.sh}
write_joblist "$out"
lacking=0   # as make-jobs-samehost.sh: every record asked for is there or has its job
for f in "${wanted[@]}"; do
  [ -s "$f" ] || grep -qF -- "--out $f " "$out" || { echo "$0: $out has no job for $f" >&2; lacking=$((lacking+1)); }
done
[ $lacking -eq 0 ] || { echo "$0: $lacking record(s) without a job: do not run this list" >&2; exit 1; }
echo "$out: each of the ${#wanted[@]} record(s) asked for is there or has its job"
