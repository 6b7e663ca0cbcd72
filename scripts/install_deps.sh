#!/usr/bin/env bash
# Installs the Debian packages that fsdpd's build and tests need, only if they are missing.
# Idempotent: a no-op when everything is present. With all of them, the configure builds every
# test area but the GPU tests, which need the CUDA toolkit (nvcc, NCCL, CUPTI): this script does
# not install it. The configure's line "fsdpd tests not built: ..." names what it left out.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git python3
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev prometheus-cpp-dev libsqlite3-dev libyaml-cpp-dev libcli11-dev
  libgloo-dev libopenblas-dev libgtest-dev libgmock-dev nlohmann-json3-dev libsystemd-dev
  libssl-dev clang-format prometheus curl ccache python3-yaml systemd
  clang-14 libclang-rt-14-dev openssl xz-utils python3-pip python3-numpy
  # expat parses fsdpctl's roofline SVG back in client_charts_test
  libexpat1-dev
  # tmux runs fsdpctl watch on a real terminal, rsvg-convert renders the roofline chart
  # (tests/integration/terminal.cmake)
  tmux librsvg2-bin fonts-dejavu-core
  # the edge runtime (edge/): Vulkan loader and headers, glslc; lavapipe and the validation
  # layer for its tests
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

# kubectl (for rendering the Kubernetes manifests in tests) may come from Kubernetes' own
# repository; Debian's kubernetes-client provides it otherwise.
if ! command -v kubectl > /dev/null; then
  missing+=(kubernetes-client)
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# numpy and safetensors for the safetensors interoperability tests (io_safetensors_test), in
# the python3 that the tests run. Debian has no safetensors package: it comes from PyPI, with
# --break-system-packages where python3 is Debian's own (PEP 668).
if ! python3 -c 'import numpy, safetensors.numpy' 2> /dev/null; then
  echo "installing numpy and safetensors for $(command -v python3)"
  python3 -m pip install --quiet numpy safetensors ||
    python3 -m pip install --quiet --break-system-packages numpy safetensors
fi

# The gguf package (llama.cpp's GGUF reader and writer) for bench/llama_cpp/export_to_gguf.py
# and its test (tests/bench/export_to_gguf_test.py).
if ! python3 -c 'import gguf' 2> /dev/null; then
  echo "installing gguf for $(command -v python3)"
  python3 -m pip install --quiet gguf ||
    python3 -m pip install --quiet --break-system-packages gguf
fi

# The edge runtime's workgroup-scope cooperative-matrix shader (edge/shaders/matmul_cm2.comp)
# is compiled by the glslang inside slang's libslang-glslang, which the slangpy wheel ships
# (Debian 12's glslc predates the extension). Only that library is used, so no dependencies.
# Without it the build leaves those shaders out (edge/CMakeLists.txt).
if ! python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("slangpy") is None)' 2> /dev/null; then
  echo "installing slangpy (its glslang) for $(command -v python3)"
  python3 -m pip install --quiet --no-deps slangpy ||
    python3 -m pip install --quiet --no-deps --break-system-packages slangpy ||
    echo "warning: could not install slangpy; fsdpd-edge builds without workgroup-scope cooperative matrices" >&2
fi

# The Python client (python/) and its test (tests/python): gRPC, protobuf and the stub generator,
# googleapis' google.rpc messages (BadRequest), PyYAML, and gRPC reflection for the test's
# reflection check; setuptools and wheel to install the package without build isolation.
python_client_modules='grpc, grpc_tools, google.protobuf, google.rpc.error_details_pb2, yaml, grpc_reflection.v1alpha, setuptools, wheel'
if ! python3 -c "import $python_client_modules" 2> /dev/null; then
  echo "installing the Python client's packages for $(command -v python3)"
  python_client_packages=(grpcio grpcio-tools protobuf googleapis-common-protos pyyaml
    grpcio-reflection setuptools wheel)
  python3 -m pip install --quiet "${python_client_packages[@]}" ||
    python3 -m pip install --quiet --break-system-packages "${python_client_packages[@]}"
fi

# mypy and the type stubs it reads for the python_mypy test (mypy --strict on python/fsdpd and
# python/examples; python/pyproject.toml holds its configuration).
python_typing_packages=(mypy types-protobuf types-grpcio types-PyYAML)
python_typing_check="import importlib.metadata as m, sys; [m.version(p) for p in sys.argv[1:]]"
if ! python3 -c "$python_typing_check" "${python_typing_packages[@]}" 2> /dev/null; then
  echo "installing mypy and type stubs for $(command -v python3)"
  python3 -m pip install --quiet "${python_typing_packages[@]}" ||
    python3 -m pip install --quiet --break-system-packages "${python_typing_packages[@]}"
fi

# cuDNN's C++ frontend (header-only) for the fused attention, where the CUDA toolkit has cuDNN.
# Its PyPI wheel carries the headers; they go to /opt/cudnn-frontend/include, where the build
# looks. Without them the build leaves cuDNN out and the own attention kernels run.
frontend_version=1.32.0
frontend_dir=/opt/cudnn-frontend
if [ -f /usr/local/cuda/include/cudnn.h ] && [ ! -f "$frontend_dir/include/cudnn_frontend.h" ]; then
  download=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 "nvidia-cudnn-frontend==$frontend_version" -d "$download"; then
    "${sudo_cmd[@]}" python3 - "$download"/*.whl "$frontend_dir" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.startswith("include/"):
            wheel.extract(name, sys.argv[2])
PY
    echo "cuDNN frontend $frontend_version headers in $frontend_dir/include"
  else
    echo "warning: could not download nvidia-cudnn-frontend; building without cuDNN attention" >&2
  fi
  rm -rf "$download"
fi
