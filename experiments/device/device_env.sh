# Sourced by the device scripts that start `harmony` or pytest on a lent GPU machine (grid_gpu.sh,
# gpu_suite.sh): the environment every call's processes need, set up once per warm machine.
#   WHEELS_DIR  the carried wheels (default .whl; `carry: [".whl"]`): PyYAML, psutil and nvidia-ml-py where the
#               image lacks them, DeepSpeed (zero-offload) and its dependencies, under .whl/ or .whl/deepspeed/
#   PIP_OUT     where pip's output goes (default: standard error; not PIP_LOG, which pip itself reads as --log)
#   TMPDIR      where the wheels ($TMPDIR/site) and the `harmony` wrapper ($TMPDIR/bin) go (default /tmp)
# Sets `wheels` (the wheel files found, empty when none was carried).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING=false
_dev_tmp=${TMPDIR:-/tmp}
# The job lists and some tests start `harmony` as a process; the GPU image has the project only as a source tree.
mkdir -p "$_dev_tmp/bin" && printf '#!/bin/sh\nexec python3 -m harmony.cli "$@"\n' > "$_dev_tmp/bin/harmony" \
  && chmod +x "$_dev_tmp/bin/harmony"
export PATH="$_dev_tmp/bin:$PATH"
wheels=$(ls "${WHEELS_DIR:-.whl}"/*.whl "${WHEELS_DIR:-.whl}"/deepspeed/*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
  # once per warm machine: a second install into the same --target prints a warning per package, and
  # those fill the device tool's output tail (12,000 characters) when two grids share a call
  _dev_stamp=$_dev_tmp/site/.installed-$(echo "$wheels" | md5sum | cut -c1-12)
  if [ -e "$_dev_stamp" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "$_dev_tmp/site" $wheels >> "${PIP_OUT:-/dev/stderr}" 2>&1 && touch "$_dev_stamp"; }; then
    export PYTHONPATH="$PYTHONPATH:$_dev_tmp/site"
  fi
fi
# zero-offload builds DeepSpeed's CPU Adam op on its first run; kept while the machine stays warm
export TORCH_EXTENSIONS_DIR=$_dev_tmp/ds-ext MAX_JOBS=${MAX_JOBS:-16}
mkdir -p "$TORCH_EXTENSIONS_DIR" && find "$TORCH_EXTENSIONS_DIR" -name lock -delete   # a killed build's lock hangs the next
