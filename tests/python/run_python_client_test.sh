#!/usr/bin/env bash
# Installs python/ (the fsdpd package, its stubs generated from proto/ by the build) into
# BUILD_DIR/python-client, then runs python_client_test.py with only that on the path beside the
# interpreter's own packages (grpcio, grpcio-tools, protobuf, googleapis-common-protos, PyYAML and
# numpy: scripts/install_deps.sh installs them).
# usage: run_python_client_test.sh PYTHON3 BUILD_DIR SOURCE_DIR
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
PYTHONPATH=$target exec "$python3" "$source_dir/tests/python/python_client_test.py" \
  "$build_dir" "$source_dir"
