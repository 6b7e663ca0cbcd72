#!/usr/bin/env bash
# Installs python/ (the fsdpd package, its stubs generated from proto/ by the build) into
# BUILD_DIR/python-client, for the python_client and python_mypy tests (the python_package
# fixture of python.cmake). It needs the interpreter's grpcio-tools, setuptools and wheel
# (scripts/install_deps.sh installs them).
# usage: install_python_package.sh PYTHON3 BUILD_DIR SOURCE_DIR
set -euo pipefail
python3=$1
build_dir=$(cd "$2" && pwd)
source_dir=$(cd "$3" && pwd)
target=$build_dir/python-client
rm -rf "$target"
# No build isolation: the build uses the interpreter's grpcio-tools, offline.
"$python3" -m pip install --quiet --no-deps --no-build-isolation --target "$target" \
  "$source_dir/python"
rm -rf "$source_dir/python/build" "$source_dir/python/fsdpd.egg-info"
echo "fsdpd package installed in $target"
