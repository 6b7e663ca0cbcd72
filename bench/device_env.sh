# The GPU machine's environment for the bench/gpu_*.sh scripts, sourced by each:
#   source "$(dirname "$0")/device_env.sh" || exit 1
# Unpacks bench/bundle_for_device.sh's .device/bundle.tar.xz when .device/bin is not there yet,
# and exports what the binaries run with. Sets repo_root, bin (.device/bin), python_bin,
# torchrun_bin and anchor (the PyTorch FSDP2 script), and defines free_port and the
# single-GPU memory sampler (start_memory_sampler FILE / stop_memory_sampler).
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$repo_root/.device/bin
if [ ! -d "$bin" ] && [ -f "$repo_root/.device/bundle.tar.xz" ]; then
  command -v xz >/dev/null || { echo "device_env: xz is needed to unpack .device/bundle.tar.xz" >&2; return 1; }
  xz -dc "$repo_root/.device/bundle.tar.xz" | tar -C "$repo_root/.device" -xf - ||
    { echo "device_env: cannot unpack .device/bundle.tar.xz" >&2; return 1; }
fi
# cuDNN (the fused attention) comes from CUDNN_LIB, else from PyTorch's venv when the machine has
# cuDNN nowhere else; without it the worker runs its own attention kernels.
python_bin=${PYTHON:-/opt/torch/.venv/bin/python}
cudnn_lib=${CUDNN_LIB:-$("$python_bin" -c \
  'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null)}
export LD_LIBRARY_PATH=$repo_root/.device/lib:/usr/local/cuda/lib64${cudnn_lib:+:$cudnn_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NVLink multicast (NVLS) stays off on the lent machines.
export NCCL_NVLS_ENABLE=0
# MFU in the step reports is measured against the H200's dense bf16 peak unless told otherwise.
export FSDPD_PEAK_FLOPS=${FSDPD_PEAK_FLOPS:-989e12}
# Where the tests find their fixtures (tests/golden).
export FSDPD_SOURCE_DIR=$repo_root
torchrun_bin=${TORCHRUN:-/opt/torch/.venv/bin/torchrun}
# ANCHOR picks another anchor script with the same flags and RESULT line
# (bench/anchor/llama_train_fsdp.py for examples/llama.yaml).
anchor=${ANCHOR:-$repo_root/bench/anchor/seed_train_fsdp.py}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# nvidia-smi's memory.used (MiB) of GPU 0 every 100 ms into $1 until stopped: the driver's view.
sampler=""
start_memory_sampler() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    # memory.used first (what the summaries' peaks read), then what says whether the GPU ran
    # at full clock: SM clock (MHz), board power (W) and utilisation (%).
    nvidia-smi --query-gpu=memory.used,clocks.sm,power.draw,utilization.gpu \
      --format=csv,noheader,nounits -i 0 -lms 100 >"$1" 2>/dev/null &
    sampler=$!
  else
    sampler=""
  fi
}
stop_memory_sampler() {
  [ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null
  sampler=""
}
