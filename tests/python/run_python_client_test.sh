#!/usr/bin/env bash
# Runs python_client_test.py with only the installed package (BUILD_DIR/python-client, which
# install_python_package.sh fills) on the path beside the interpreter's own packages (grpcio,
# protobuf, googleapis-common-protos, PyYAML, numpy, grpcio-reflection:
# scripts/install_deps.sh installs them).
# usage: run_python_client_test.sh PYTHON3 BUILD_DIR SOURCE_DIR
set -euo pipefail
python3=$1
build_dir=$(cd "$2" && pwd)
source_dir=$(cd "$3" && pwd)
PYTHONPATH=$build_dir/python-client exec "$python3" \
  "$source_dir/tests/python/python_client_test.py" "$build_dir" "$source_dir"
