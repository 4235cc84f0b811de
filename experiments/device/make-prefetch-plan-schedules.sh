#!/usr/bin/env bash
# Performance log 32 (CPU machine): the committed figure-10 schedules of the A/B points searched again from
# the same profile and calibration, so that they carry the plan's `prefetch_waits` (written since entry 32).
# The search is deterministic: each new schedule must have the committed one's configuration (checked).
#   bash experiments/device/make-prefetch-plan-schedules.sh MODEL:MODE:D ...
set -euo pipefail
R=results/paper/1xH100-80GB-HBM3; A=$R/remeasure/prefetch-plan
mkdir -p "$A/schedules"
for point in "$@"; do
  IFS=: read -r m mode d <<< "$point"
  old=$R/schedules/$m/$mode-N1-D$d-auto.json new=$A/schedules/$m-$mode-N1-D$d.json
  harmony schedule "$R/profiles/$m.json" --model "$R/models/$m.json" --minibatch "$d" --gpus 1 --mode "$mode" \
    --gpu-memory 11GiB --calibration "$R/calibration.json" -o "$new" 2> "${new%.json}.log"
  python3 - "$old" "$new" <<'PY'
import sys
from harmony.jsonio import read_json
old, new = (read_json(p) for p in sys.argv[1:])
assert old["graph"]["config"] == new["graph"]["config"], f"{sys.argv[2]}: the search chose another configuration"
p = new["prediction"]
print(f"{sys.argv[2]}: same configuration; predicted {p['iter_time_s']:.3f} s (committed "
      f"{old['prediction']['iter_time_s']:.3f}), prefetch_waits {p['prefetch_waits']}")
PY
done
