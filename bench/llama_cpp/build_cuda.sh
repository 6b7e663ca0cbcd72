#!/bin/bash
# Builds llama.cpp's CUDA backend on the GPU machine (16 cores, nvcc 13.0, cmake, ninja), for
# bench/llama_cpp/edge_vs_llama.sh: llama-bench and llama-quantize only, sm_90 only, Release,
# statically linked against ggml (BUILD_SHARED_LIBS=OFF), no tests, examples, server or HTTPS.
#
#   bench/llama_cpp/build_cuda.sh SRC BUILD [TARGET...]
#
# SRC is a llama.cpp source tree (a .tar.xz of one is unpacked first, into BUILD's parent);
# BUILD is the build folder; TARGETs default to llama-bench llama-quantize. The binaries end up
# in BUILD/bin. A second run resumes a build cut short (ninja keeps what is done), so a build
# that outlives one command finishes in the next. Environment: JOBS (default: the core count),
# CUDA_ARCH (default 90), NVCC (default /usr/local/cuda/bin/nvcc).
#
# GGML_NATIVE is off, so the CPU backend is built for AVX2/FMA/F16C (every x86 server this
# runs on has them); with -ngl 99 the CPU only feeds the GPU. Flash attention kernels are built
# for f16 K/V (GGML_CUDA_FA_ALL_QUANTS off, llama.cpp's default); NCCL (multi-GPU) is off.
set -euo pipefail
src=${1:?usage: build_cuda.sh SRC BUILD [TARGET...]}
build=${2:?usage: build_cuda.sh SRC BUILD [TARGET...]}
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(llama-bench llama-quantize)
jobs=${JOBS:-$(nproc)}
arch=${CUDA_ARCH:-90}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}

if [ -f "$src" ]; then  # a source tarball: unpack it beside the build folder
  dest=$(dirname "$build")
  mkdir -p "$dest"
  top=$(tar -tJf "$src" | awk -F/ 'NR == 1 {print $1}')  # (awk reads on: no SIGPIPE)
  [ -f "$dest/$top/CMakeLists.txt" ] || tar -xJf "$src" -C "$dest"
  src=$dest/$top
fi
[ -f "$src/ggml/src/ggml-cuda/CMakeLists.txt" ] || {
  echo "build_cuda.sh: $src is not a llama.cpp source tree with ggml-cuda" >&2
  exit 2
}

start=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$src" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DGGML_CUDA=ON \
    -DGGML_CUDA_NCCL=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF
fi
ninja -C "$build" -j "$jobs" "${targets[@]}"
echo "build_cuda.sh: ${targets[*]} in $build/bin ($(($(date +%s) - start)) s)"
