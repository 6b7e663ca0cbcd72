#!/usr/bin/env bash
# Installs the Debian packages that fsdpd's build and tests need, only if they are missing.
# Idempotent: a no-op when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git python3
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev prometheus-cpp-dev libsqlite3-dev libyaml-cpp-dev libcli11-dev
  libgloo-dev libopenblas-dev libgtest-dev libgmock-dev nlohmann-json3-dev libsystemd-dev
  libssl-dev clang-format prometheus curl ccache python3-yaml systemd
  clang-14 libclang-rt-14-dev openssl xz-utils
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

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "installing: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
