#!/usr/bin/env bash
# Performance log 32, follow-up. The profiler now records a vLayer's host issue time as the fastest of its
# trials (it was the median: two profiles of one host summed vgg416's backward issue at u = 8 to 230 and
# 337 ms, h100-issue1). On ONE host: vgg416 profiled three times at u = 8 and 16 (before, between and after
# two runs), and the current vgg416 vDP D = 256 (u = 8) and D = 16 (u = 16) schedules run; each profile then
# re-predicts both runs (resimulate_runs.py --profiles). If the fix works, the three issue sums agree within
# about 10% and the predictions come within 10% of the runs. About 4 minutes. Run through grid_gpu.sh:
#   BUDGET_S=500 TAIL_S=40 bash experiments/device/grid_gpu.sh experiments/device/issue-min-1xH100.sh \
#       results/paper/1xH100-80GB-HBM3 h100-issuemin1
set -u
R=results/paper/1xH100-80GB-HBM3; P=$R/remeasure/issue-min
mkdir -p "$P/runs" "$P/profiles"
prof() {
  local out=$P/profiles/vgg416.$1.json
  [ -s "$out" ] && return 0
  echo "[$SECONDS s] vgg416 profile $1"
  timeout 150 harmony profile "$R/models/vgg416.json" --device cuda --precision tf32 --gpu-memory 11GiB \
    --ubatch 8,16 -o "$out" > "${out%.json}.log" 2>&1 || echo "FAILED ($?): $out"
}
source "$(dirname "$0")/run_lib.sh"
run() { RUN_TIMEOUT_S=170 one_run "$P/runs/vgg416-vDP-D$1.jsonl" "vgg416 vDP D=$1" "$R/schedules/vgg416/vDP-N1-D$1-auto.json"; }
prof a; run 256; prof b; run 16; prof c
python3 - "$P/profiles" <<'PY'
import glob, sys
from harmony.jsonio import read_json
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    p = read_json(f)
    for i, u in enumerate(p["ubatch_sizes"]):
        v = p["vlayers"]
        print(f"{f.split('/')[-1]} u={u}: backward device {sum(x['bwd_s'][i] for x in v) * 1e3:.0f} ms, issue "
              f"{sum(x['bwd_issue_s'][i] for x in v) * 1e3:.0f} ms (slowest-trial sum "
              f"{sum(x['bwd_issue_spread'][i][1] for x in v) * 1e3:.0f}); forward device "
              f"{sum(x['fwd_s'][i] for x in v) * 1e3:.0f}, issue {sum(x['fwd_issue_s'][i] for x in v) * 1e3:.0f} ms")
PY
