#!/bin/bash
# fsdpd-edge on a Vulkan device: `fsdpd-edge devices`, then edge_bench (bench/edge_bench.cc) on
# the seed model's shape (dim 2048, 12 layers, 16 heads, vocab 32000, ffn ×4; batch 8 × 1024)
# with random weights written as an export: forward tokens/s and matmul TFLOP/s with and without
# cooperative matrices, zero-copy vs staged weights.
#
# Here (lavapipe, a small shape):   bench/edge_bench.sh build --dim 256 --layers 4 --heads 4 \
#                                      --vocab 256 --batch 4 --seq 128 --iters 2
# On the H200 (bundled as below):   bench/edge_bench.sh .device/edge
#
# Bundling for the GPU machine (from the repository root, .device/ and .gl/ are git-ignored):
#   cmake -S . -B build-edge -G Ninja -DCMAKE_BUILD_TYPE=Release -DFSDPD_CUDA=OFF -DFSDPD_TESTS=OFF
#   cmake --build build-edge --target fsdpd-edge edge_bench
#   mkdir -p .device/edge && cp build-edge/edge/fsdpd-edge build-edge/bench/edge_bench .device/edge/
#   strip .device/edge/*; ../shared/device/bundle-libs.sh .device/edge/* .device/edge/lib
# and carry .device and .gl (the Vulkan loader and GL dispatch libraries, see the device notes);
# the run then starts with
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
#   export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
#   export LD_LIBRARY_PATH=$PWD/.device/edge/lib:$LD_LIBRARY_PATH
set -euo pipefail
dir=${1:?usage: bench/edge_bench.sh BIN_DIR [edge_bench options]}
shift
if [ -x "$dir/edge/fsdpd-edge" ]; then  # a build tree
  edge=$dir/edge/fsdpd-edge
  bench=$dir/bench/edge_bench
else
  edge=$dir/fsdpd-edge
  bench=$dir/edge_bench
fi
echo "== $edge devices"
"$edge" devices
echo "== $bench $*"
"$bench" "$@"
