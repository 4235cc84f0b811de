#!/usr/bin/env bash
# Rebuilds the ignored .whl/deepspeed/ that device calls carry for zero-offload (the GPU machines have no
# network): DeepSpeed 0.19.8 as a pure-Python wheel and its dependencies the GPU image lacks, for that
# image's Python 3.12 on x86-64 (docs/baselines.md). About a minute; run here, in the repository root.
#   bash experiments/device/fetch_wheels.sh          then carry [".whl"] in the device call
set -euo pipefail
dest=.whl/deepspeed
mkdir -p "$dest"
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$dest" deepspeed==0.19.8
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    -d "$dest" hjson pydantic
ls "$dest"
python3 experiments/device/tree_size.py --carry .whl --top 3 | tail -1
