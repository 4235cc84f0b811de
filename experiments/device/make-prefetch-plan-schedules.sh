#!/usr/bin/env bash
# Performance log 32 (CPU machine): the committed figure-10 schedules of the A/B points searched again from
# the same profile and calibration, so that they carry the plan's `prefetch_waits` (written since entry 32).
# The search is deterministic: each new schedule must have the committed one's configuration (checked).
# HEADROOM=0.10 searches with that headroom instead of the default 0.05 (schedule name suffixed -h10; the
# configuration may differ then, and is printed): one pool needs more slack (entry 32).
#   [HEADROOM=0.10] bash experiments/device/make-prefetch-plan-schedules.sh MODEL:MODE:D ...
set -euo pipefail
R=results/paper/1xH100-80GB-HBM3; A=$R/remeasure/prefetch-plan
mkdir -p "$A/schedules"
for point in "$@"; do
  IFS=: read -r m mode d <<< "$point"
  old=$R/schedules/$m/$mode-N1-D$d-auto.json new=$A/schedules/$m-$mode-N1-D$d${HEADROOM:+-h${HEADROOM#0.}}.json
  harmony schedule "$R/profiles/$m.json" --model "$R/models/$m.json" --minibatch "$d" --gpus 1 --mode "$mode" \
    --gpu-memory 11GiB --calibration "$R/calibration.json" ${HEADROOM:+--headroom $HEADROOM} -o "$new" \
    2> "${new%.json}.log"
  python3 - "$old" "$new" "${HEADROOM:-}" <<'PY'
import sys
from harmony.jsonio import read_json
old, new = (read_json(p) for p in sys.argv[1:3])
c = new["graph"]["config"]
if sys.argv[3]:
    print(f"{sys.argv[2]}: headroom {sys.argv[3]}: u {c['ubatch_fwd']}/{c['ubatch_bwd']}, {len(c['bwd_packs'])} bwd "
          f"packs, peak {max(new['prediction']['peak_memory_bytes']) / 2**30:.2f} GiB")
else:
    assert old["graph"]["config"] == c, f"{sys.argv[2]}: the search chose another configuration"
p = new["prediction"]
print(f"{sys.argv[2]}: {'' if sys.argv[3] else 'same configuration; '}predicted {p['iter_time_s']:.3f} s (committed "
      f"{old['prediction']['iter_time_s']:.3f}), prefetch_waits {p['prefetch_waits']}")
PY
done
