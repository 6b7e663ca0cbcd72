#!/bin/bash
# One GPU call for the edge runtime's comparison with llama.cpp and its lifecycle check, from
# the repository root on the GPU machine, with .gl (the Vulkan loader) and .device/llama carried:
#   .device/llama/llama-vulkan.tar.xz  llama-bench, llama-quantize built here with GGML_VULKAN
#   .device/llama/cuda/llama-bench-cuda.tar.xz  llama-bench built there by build_cuda.sh (optional)
#   .device/llama/edge.tar.xz  fsdpd-edge, edge_bench, edge_lifecycle_test (and
#       edge_lifecycle_test_before, built without the drivers kept loaded), their libraries in lib/
#   .device/llama/whl  the gguf wheels for the converter
# Writes its logs under $OUT. The parts, each with its own time limit:
#   1. bench/llama_cpp/edge_vs_llama.sh on both default shapes (Vulkan and CUDA llama.cpp);
#   2. the lifecycle test before the fix, 40 backends, with the loader's messages;
#   3. the lifecycle test as committed, 200 backends.
# AB=1 times `generate` (seed shape, fp16, int8 and int8 with `--matvec wide-words`, AB_RUNS times
# each, default 2) with every edge/fsdpd-edge-* build in the bundle and the bundle's own (a
# build older than --matvec refuses the flag: keep such builds out of the bundle); OP_TIMES=1
# adds `generate --op-times` on the seed shape (fp16, int8) before 2; INT8_CHECK=1 edge_bench's
# int8 check against the CPU; .device/ppl (model.safetensors, heldout.txt), if
# carried, a trained model's perplexity, fp16 and int8, GPU and CPU; LIFECYCLE=0 skips 2 and 3.
# The validation layer stays off on the GPU (FSDPD_EDGE_LIFECYCLE_VALIDATION=0): Debian 12's
# layer predates VK_NV_cooperative_matrix2 and reports its use as errors.
set -uo pipefail
out=${OUT:?set OUT to a folder for the logs}
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
w=/tmp/evl
mkdir -p "$w/cuda"
tar -xJf .device/llama/llama-vulkan.tar.xz -C "$w"
tar -xJf .device/llama/edge.tar.xz -C "$w"
cuda=()  # llama.cpp CUDA where its bundle was carried
if [ -f .device/llama/cuda/llama-bench-cuda.tar.xz ]; then
  tar -xJf .device/llama/cuda/llama-bench-cuda.tar.xz -C "$w/cuda" && cuda=(--cuda "$w/cuda")
fi
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv | tee "$out/gpu.txt"

timeout "${BENCH_SECONDS:-330}" bash bench/llama_cpp/edge_vs_llama.sh --vulkan "$w/vulkan" \
  "${cuda[@]}" --edge "$w/edge" --wheels .device/llama/whl --work "$w/work" \
  ${SHAPES:+--shape $SHAPES} 2>&1 | tee "$out/edge_vs_llama.txt"
tar -czf "$out/logs.tgz" -C "$w/work" logs 2>/dev/null

life() {  # NAME BINARY BACKENDS SECONDS [ENV...]
  local name=$1 binary=$2 backends=$3 seconds=$4
  shift 4
  env "$@" LD_LIBRARY_PATH="$w/edge/lib" FSDPD_EDGE_LIFECYCLE_VALIDATION=0 \
    FSDPD_EDGE_LIFECYCLE_BACKENDS="$backends" timeout "$seconds" "$w/edge/$binary" \
    >"$out/$name.txt" 2>&1
  echo "$name: exit $?"
  grep -E "live backend|backends:|OK|FAILED|Failure|backend [0-9]+:" "$out/$name.txt" | head -8
}
if [ "${AB:-0}" = 1 ]; then  # fsdpd-edge builds beside the bundle's own (edge/fsdpd-edge-*), seed
  for binary in "$w"/edge/fsdpd-edge-* "$w/edge/fsdpd-edge"; do
    for config in auto:auto int8:auto int8:wide-words; do  # weights:matvec layout
      IFS=: read -r weights matvec <<<"$config"
      for run in $(seq "${AB_RUNS:-2}"); do
        LD_LIBRARY_PATH="$w/edge/lib" "$binary" generate "$w/work/seed.safetensors" \
          --prompt-ids "1 2 3 4 5 6 7 8" --new-tokens 128 --seq 512 --weights "$weights" \
          --matvec "$matvec" 2>&1 >/dev/null |
          sed -n "s|^fsdpd-edge: decoding|$(basename "$binary") $weights (matvec $matvec):|p"
      done
    done
  done | tee "$out/ab.txt"
fi
if [ "${OP_TIMES:-0}" = 1 ]; then  # where decoding's time goes, fp16 and int8, on the seed shape
  for weights in auto int8; do
    LD_LIBRARY_PATH="$w/edge/lib" "$w/edge/fsdpd-edge" generate "$w/work/seed.safetensors" \
      --prompt-ids "1 2 3 4 5 6 7 8" --new-tokens 128 --seq 512 --weights "$weights" --warmup 1 --op-times \
      2>&1 >/dev/null | tee "$out/op_times_$weights.txt" | grep -E "decoding|matvec|rms|GPU"
  done
fi
if [ -f .device/ppl/model.safetensors ]; then  # a trained model: perplexity, GPU and CPU
  for args in "--weights auto" "--weights int8" "--backend cpu" "--backend cpu --weights int8"; do
    echo "== eval .device/ppl/model.safetensors $args"
    LD_LIBRARY_PATH="$w/edge/lib" timeout 100 "$w/edge/fsdpd-edge" eval \
      .device/ppl/model.safetensors --text .device/ppl/heldout.txt --seq 128 --batch 8 $args 2>&1 |
      grep -E "perplexity|weights placed"
  done
fi
if [ "${INT8_CHECK:-0}" = 1 ]; then  # the int8 blocks against the CPU, then timings
  LD_LIBRARY_PATH="$w/edge/lib" timeout "${INT8_SECONDS:-150}" "$w/edge/edge_bench" --causal --weights int8 \
    --batch 1 --seq 512 --iters 3 --model /tmp/int8_check.safetensors >"$out/int8_check.txt" 2>&1
  echo "int8 check: exit $?"
  grep -E "pass|FAIL|forward|^\[|decoding" "$out/int8_check.txt" | head -40
fi
[ "${LIFECYCLE:-1}" = 1 ] || exit 0
life lifecycle_before edge_lifecycle_test_before 40 90 VK_LOADER_DEBUG=error,warn
grep -iE "tls|dlopen|cannot|failed to|libGLX|libnvidia" "$out/lifecycle_before.txt" | sort |
  uniq -c | sort -rn | head -12
life lifecycle edge_lifecycle_test 200 "${LIFE_SECONDS:-200}"
gzip -f "$out/lifecycle_before.txt"
