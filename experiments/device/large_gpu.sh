#!/usr/bin/env bash
# The `large` scale (DESIGN.md section 6): the largest GPT-2 the box trains, no GPU memory cap, model state in
# host memory; Harmony against fsdp-offload and zero-offload on the same box, same model, same minibatch.
#
#   bash experiments/device/large_gpu.sh OUTDIR        (repository root, on the GPU machine)
#
# GPT-2 of width 4096 (the paper's 10 B shape) with NL layers (experiments/scales.yaml `models`:
# gpt2-4096x24 = 5.25 B parameters, 84.0 GB of fp32 W + dW + Adam state: all but 1 GB of the H100's 85.0 GB, too much to train there, and
# what the 126 GiB host of nvidia-h100-x1 can keep). Writes OUTDIR/gpt2-4096x<NL>-D<D>-N1/<system>.jsonl
# (+ .log; the device layout `harmony figure --import-device` files), the profile, schedule and search.
# Through the device tool: give an OUTDIR outside $OUT and tar it into $OUT at the end (`tar czf $OUT/l.tgz
# -C OUTDIR .`): only 8 files come back from $OUT, and the first call lost its profile.json that way.
#
# Knobs (environment): NL (24), D (32), SYSTEMS ("harmony fsdp-offload zero-offload": split them over device
# calls, each takes minutes), PROFILE (a profile.json made earlier; default: profile here, ~2 min),
# DEEPEN_FROM (a profile of the same family with fewer layers, e.g. the committed 24-layer one: its costs are
# mapped onto this NL by experiments/deepen_profile.py instead of profiling here, which at 72 layers would
# take minutes of the call; the profile says where it came from, and carries this machine's host memory, the
# schedule's host budget, in place of the profiled host's),
# CALIBRATION (results/paper/1xH100-80GB-HBM3/calibration.json: same machine kind; it gives the roofline),
# HEADROOM (0.05 of the GPU's memory left out of the plan: GPT-2 5.25 B planned 67.97 GiB and peaked at 67.91
# allocated, 67.96 reserved, no retry, on the 252 GiB host; with entry 51's search 5% is 1.2% faster than 10%),
# ITERS (4: warm-up, traced, 2 timed),
# FSDP_UBATCH / ZERO_UBATCH (32,16: no cap, so the largest microbatches, fewest re-fetches, are tried),
# HARMONY_LIMIT_S (420), BASE (gpt2-10b; BASE=gpt2-tiny DEVICE=cpu PRECISION=fp32 for a CPU smoke run),
# COMPUTE_SCALE (1: Harmony's search takes the profile's GPU times; 1.05 plans for a run at the H100's power
# cap, where the 36-layer model's tasks ran 5% over their profile, docs/performance.md entry 65; `profile`:
# the factors the profile measured with --sustain, one per microbatch size, entry 68), SUSTAIN_S (4 on a
# GPU, 0 on the CPU: the profile runs the block's backward back to back this long at each u up to 0.25 s a
# backward, six sizes for the 10 B GPT-2's block, and records its sustained time, entries 66 and 68).
set -uo pipefail
OUTROOT=${1:?usage: large_gpu.sh OUTDIR}
NL=${NL:-24}; D=${D:-32}; BASE=${BASE:-gpt2-10b}
DEVICE=${DEVICE:-cuda}; PRECISION=${PRECISION:-tf32}
SYSTEMS=${SYSTEMS:-"harmony fsdp-offload zero-offload"}
CALIBRATION=${CALIBRATION:-results/paper/1xH100-80GB-HBM3/calibration.json}
ID=$([ "$BASE" = gpt2-10b ] && echo "gpt2-4096x$NL" || echo "$BASE-x$NL")
OUT="$OUTROOT/$ID-D$D-N1"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# checked from / : `python3 -c` would find harmony in the working directory, a script under experiments/ does not
if ! (cd / && python3 -c "import harmony") 2>/dev/null; then export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"; fi
H="python3 -m harmony.cli"
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/steps.txt"; }

$H env --device "$DEVICE" --precision "$PRECISION" > "$OUTROOT/env.json"
free -g > "$OUT/host_memory.txt" 2>&1
M="$OUT/model.json"
[ -f "$M" ] || $H decompose "$BASE" --set "n_layer=$NL" --name "$ID" -o "$M" 2>&1 | tee -a "$OUT/steps.txt"

P=${PROFILE:-$OUT/profile.json}
case " $SYSTEMS " in *" harmony "*)
  if [ ! -f "$P" ] && [ -n "${DEEPEN_FROM:-}" ]; then
    stamp "profile $ID: $DEEPEN_FROM's costs on $NL layers (experiments/deepen_profile.py)"
    python3 experiments/deepen_profile.py "$DEEPEN_FROM" "$M" -o "$P" --host-here > "$OUT/profile.log" 2>&1
    stamp "deepen rc=$?"; tail -2 "$OUT/profile.log"
  fi
  if [ ! -f "$P" ]; then
    stamp "profile $ID (no cap, $DEVICE, $PRECISION)"
    timeout "${PROFILE_LIMIT_S:-240}" $H profile "$M" -o "$P" --device "$DEVICE" --precision "$PRECISION" \
      --trials 5 --max-trial-s 0.25 --sustain "${SUSTAIN_S:-$([ "$DEVICE" = cpu ] && echo 0 || echo 4)}" \
      > "$OUT/profile.log" 2>&1
    stamp "profile rc=$?"; tail -2 "$OUT/profile.log"
  fi ;;
esac

# Harmony (vPP, N=1, planned under the profiled GPU's memory less HEADROOM) and the offloading baselines
# (searched microbatch), no cap: the same steps as the paper-scale script, with this model's files
stamp "systems: $SYSTEMS (no cap)"
MODEL="$ID" MODEL_JSON="$M" PROFILE="$P" CALIBRATION="$CALIBRATION" CAP= D="$D" DEVICE="$DEVICE" \
  PRECISION="$PRECISION" SYSTEMS="$SYSTEMS" HEADROOM="${HEADROOM:-0.05}" COMPUTE_SCALE="${COMPUTE_SCALE:-1}" \
  HARMONY_ITERS="${ITERS:-4}" HARMONY_LIMIT_S="${HARMONY_LIMIT_S:-420}" \
  ITERS="${ITERS:-4}" FSDP_UBATCH="${FSDP_UBATCH:-32,16}" ZERO_UBATCH="${ZERO_UBATCH:-32,16}" \
  FSDP_LIMIT_S="${FSDP_LIMIT_S:-270}" ZERO_LIMIT_S="${ZERO_LIMIT_S:-240}" \
  bash experiments/device/baselines_gpu.sh "$OUT" 2>&1 | tee -a "$OUT/steps.txt"
free -g >> "$OUT/host_memory.txt" 2>&1
stamp "done"
