#!/usr/bin/env bash
# The include rules of docs/architecture.md ("Folders and what each may include"), checked on
# every #include line of the C++ and CUDA sources: a folder includes only itself and the layers
# below it (base/, formats/, proto/ at the bottom; then kernels/, server/, client/; then worker/,
# edge/; bench/ and tests/ may include anything); server/, client/ and edge/ include no CUDA
# header; edge/ includes no gRPC or protobuf. Prints each violation as file:line and exits 1 if
# there is one. Run by .ci/run.
#
#   scripts/check_layering.sh [SOURCE_DIR]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# What each folder may include of the repository's folders. `fsdpd/` is proto/'s generated code
# (fsdpd/v1/*.pb.h), so it counts as proto/.
declare -A allowed=(
  [base]="base"
  [formats]="formats base"
  [proto]="proto fsdpd base"
  [kernels]="kernels base"
  [server]="server proto fsdpd base"
  [client]="client proto fsdpd base"
  [worker]="worker kernels formats proto fsdpd base"
  [edge]="edge kernels/cpu formats base"
)
# Headers that bring CUDA in: the toolkit's and its libraries', and the repository's own
# CUDA-only ones.
cuda_headers='^(cuda[^/]*\.h|cublas[^/]*\.h|cudnn[^/]*\.h|nccl\.h|cupti[^/]*\.h|nvml\.h|nvrtc\.h|curand[^/]*\.h|cufft[^/]*\.h|cuda_fp16\.h|cuda_bf16\.h|thrust/.*|cub/.*|kernels/cuda/.*|base/cuda_check\.h)$'
grpc_headers='^(grpc/.*|grpcpp/.*|grpc\+\+/.*|google/protobuf/.*|google/rpc/.*|fsdpd/.*|proto/.*)$'
repository_folders='^(base|formats|proto|fsdpd|kernels|server|client|worker|edge|bench|tests)/'

# grep -rn's "file:line:   #include <path>" (or "path").
include_line='^([^:]+:[0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^">]+)[">]'
violations=0
report() {  # report FILE:LINE MESSAGE
  echo "$1: $2"
  violations=$((violations + 1))
}

for folder in "${!allowed[@]}"; do
  [ -d "$folder" ] || continue
  # file:line:#include "path" (or <path>), for every C++/CUDA source of the folder.
  while IFS= read -r hit; do
    [[ $hit =~ $include_line ]] || continue
    location=${BASH_REMATCH[1]}
    included=${BASH_REMATCH[2]}
    if [[ $folder =~ ^(server|client|edge)$ ]] && [[ $included =~ $cuda_headers ]]; then
      report "$location" "$folder/ includes the CUDA header $included ($folder/ never includes CUDA)"
      continue
    fi
    if [ "$folder" = edge ] && [[ $included =~ $grpc_headers ]]; then
      report "$location" "edge/ includes $included (edge/ never includes gRPC, protobuf or proto/)"
      continue
    fi
    [[ $included =~ $repository_folders ]] || continue
    ok=false
    for below in ${allowed[$folder]}; do
      if [[ $included == "$below"/* ]]; then ok=true; fi
    done
    if ! $ok; then
      report "$location" "$folder/ includes $included ($folder/ may include: ${allowed[$folder]// /, })"
    fi
  done < <(grep -rnE --include='*.h' --include='*.hpp' --include='*.cc' --include='*.cpp' \
    --include='*.cu' --include='*.cuh' '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' \
    "$folder" || true)
done

if [ "$violations" -gt 0 ]; then
  echo "check_layering: $violations include(s) against docs/architecture.md's layers" >&2
  exit 1
fi
echo "check_layering: every #include keeps to docs/architecture.md's layers"
