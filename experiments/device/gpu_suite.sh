#!/usr/bin/env bash
# The whole GPU test suite on a lent machine, written as a record (suite70, suite78 and suite79 were typed
# by hand, and suite79's command lost its environment record):
#   bash experiments/device/gpu_suite.sh OUTDIR [PYTEST_ARGS...]      e.g. OUTDIR=results/probes/gpu-suite/1xH200/suite80
# OUTDIR gets
#   gpu-suite.log   pytest's output (`-m gpu -rs tests/` unless PYTEST_ARGS are given), then `rc=N wall=Ss`
#   env.json        `harmony env --device cuda`: GPUs, driver, torch, host, and source_trees (the code's git
#                   tree hashes from the files: the .git the device tool carries can lag them)
#   suite.json      the tree hashes of harmony/, baselines/ and tests/, so `harmony provenance OUTDIR/suite.json`
#                   names the commit whose code and tests ran
#   gpus.txt        nvidia-smi's GPU ids; pip.log when wheels were carried
# Carry `.whl` (DeepSpeed and the small packages the image lacks) and zero-offload's cases run too
# (device_env.sh: WHEELS_DIR, TMPDIR).
# SUITE_S bounds pytest (default 540 s, to leave a 600 s device command time to copy the results out).
set -uo pipefail
O=${1:?usage: gpu_suite.sh OUTDIR [PYTEST_ARGS...]}; shift
mkdir -p "$O"
PIP_OUT=$O/pip.log source "$(dirname "$0")/device_env.sh"   # PYTHONPATH, NCCL settings, `harmony`, the wheels
nvidia-smi --query-gpu=uuid,name,driver_version --format=csv > "$O/gpus.txt" 2>&1
python3 -m harmony.cli env --device cuda > "$O/env.json" 2> "$O/env.err" || echo "harmony env failed: $O/env.err" >&2
python3 - "$O/suite.json" <<'EOF'
import json, sys
from harmony.provenance import SOURCE_DIRS, source_trees
json.dump({"source_trees": source_trees(".", (*SOURCE_DIRS, "tests"))}, open(sys.argv[1], "w"), indent=1)
EOF
[ $# -gt 0 ] || set -- -m gpu -rs tests/
start=$(date +%s)
timeout "${SUITE_S:-540}" python3 -m pytest -q -p no:cacheprovider "$@" > "$O/gpu-suite.log" 2>&1
rc=$?
echo "rc=$rc wall=$(( $(date +%s) - start ))s" >> "$O/gpu-suite.log"
tail -n 3 "$O/gpu-suite.log"
exit $rc
