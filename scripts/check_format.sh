#!/usr/bin/env bash
# Fails when any C++/CUDA source or proto is not clang-formatted (Google base, 100 columns).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.proto')
if [ ${#files[@]} -eq 0 ]; then exit 0; fi
clang-format --dry-run --Werror "${files[@]}"
echo "clang-format: ${#files[@]} files clean"
