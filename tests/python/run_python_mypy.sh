#!/usr/bin/env bash
# mypy --strict (python/pyproject.toml's [tool.mypy]) on the installed fsdpd package, its
# generated stubs beside it, and on python/examples, which import it as a user's program does.
# usage: run_python_mypy.sh PYTHON3 BUILD_DIR SOURCE_DIR
set -euo pipefail
python3=$1
build_dir=$(cd "$2" && pwd)
source_dir=$(cd "$3" && pwd)
target=$build_dir/python-client
cd "$target"
MYPYPATH=$target exec "$python3" -m mypy --config-file "$source_dir/python/pyproject.toml" \
  --cache-dir "$build_dir/mypy-cache" fsdpd "$source_dir/python/examples"
