#!/usr/bin/env bash
# docs/performance.md entry 99: A/B of the runtime's weight and gradient copies on host-bound Harmony plans,
# runs interleaved round by round (old vlayer pack, old vlayer pack, ...) so that a drift of the host hits every
# arm alike. Arms:
#   old     this tree with PATCH applied (the runtime before the change: one copy per vLayer, a vDP pack's
#           gradients copied to the arena tensor by tensor)
#   vlayer  this tree, --weight-copies per-vlayer (the default): a vDP pack's gradients in one copy
#   pack    this tree, --weight-copies per-pack: one copy per pack as well
#   git diff -R <before> -- harmony > experiments/device/ab/copies-before.patch          # CPU machine
#   PATCH=experiments/device/ab/copies-before.patch bash experiments/device/copies-ab-2xH200.sh OUTDIR
# PLANS (paths under SCHEDULES, without .json; default figure 10's ResNet1026 D = 64 plans on 2x H200),
# ARMS ("old vlayer pack"), ROUNDS (3), RUN_LIMIT_S (90); paper settings (DEVICE cuda, CAP 11GiB, PREC tf32;
# DEVICE=cpu CAP= PREC=fp32 smoke-tests the script), ITERS (6) iterations, 1 warm-up. No run starts when the call's deadline (HARMONY_DEADLINE, epoch s; default 540 s from the
# start) is nearer than RUN_LIMIT_S. Writes OUTDIR/<plan>.<arm>.<round>.{jsonl,log}, OUTDIR/env.json and
# prints per plan and arm the runs' medians and rank 0's host issue time per iteration.
set -uo pipefail
O=${1:?usage: copies-ab-2xH200.sh OUTDIR}
: "${PATCH:?PATCH=<a diff that turns this tree into the runtime before the change>}"
S=$(cd "${SCHEDULES:-results/paper/2xH200/schedules}" && pwd)
PLANS=${PLANS:-"resnet1026/vDP-N2-D64-auto resnet1026/vPP-N2-D64-auto"}
ARMS=${ARMS:-"old vlayer pack"}
ROUNDS=${ROUNDS:-3}
RUN_LIMIT_S=${RUN_LIMIT_S:-90}
ITERS=${ITERS:-6}
DEVICE=${DEVICE:-cuda}; CAP=${CAP-11GiB}; PREC=${PREC:-tf32}
RUN_ARGS=(--device "$DEVICE" --precision "$PREC"); [ -n "$CAP" ] && RUN_ARGS+=(--gpu-memory "$CAP")
mkdir -p "$O"
O=$(cd "$O" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/ab_tree_lib.sh"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=${PYTHONPATH:-}
make_b_tree "$PATCH"
declare -A AB_TREE=([old]=$B [vlayer]=$A [pack]=$A)
declare -A COPIES=([old]=per-vlayer [vlayer]=per-vlayer [pack]=per-pack)
AB_OUT=$O AB_DEADLINE=${HARMONY_DEADLINE:-$(( $(date +%s) + 540 ))}
python3 -m harmony.cli env --device "$DEVICE" --precision "$PREC" > "$O/env.json" 2> "$O/env.err"
for r in $(seq 1 "$ROUNDS"); do
  for plan in $PLANS; do
    name=$(echo "$plan" | tr '/' '-')
    for arm in $ARMS; do
      ab_step "$name" "$arm" "$r" "$RUN_LIMIT_S" -- python3 -m harmony.cli run "$S/$plan.json" --data synthetic \
        --iters "$ITERS" --warmup 1 "${RUN_ARGS[@]}" --weight-copies "${COPIES[$arm]}" \
        -o "$O/$name.$arm.$r.jsonl"
    done
  done
done
PYTHONPATH=$A/experiments/device python3 - "$O" <<'PY'
import statistics, sys
from run_files import timed_runs
by = {}
for fname, s, its in timed_runs(sys.argv[1]):
    issue = [(r.get("host_phases") or [{}])[0].get("issue_s") for r in its]     # rank 0's
    plan, arm, _ = fname.rsplit(".", 3)[:3]
    by.setdefault((plan, arm), []).append((s["iter_time_s"], statistics.median(x for x in issue if x is not None),
                                           [r["time_s"] for r in its], s.get("alloc_retries")))
for (plan, arm), runs in sorted(by.items()):
    meds, iss = [m for m, *_ in runs], [i for _, i, *_ in runs]
    pooled = [t for *_, ts, _ in runs for t in ts]
    print(f"{plan} {arm}: s/iteration {', '.join(f'{m:.3f}' for m in meds)} (median {statistics.median(meds):.3f}; "
          f"all {len(pooled)} iterations {statistics.median(pooled):.3f}); rank 0 issue s/iteration "
          f"{', '.join(f'{i:.3f}' for i in iss)} (median {statistics.median(iss):.3f}); allocator retries "
          f"{[r[-1] for r in runs]}")
PY
