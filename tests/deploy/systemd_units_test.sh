#!/usr/bin/env bash
# Installs the deploy component into a temporary prefix and checks the systemd units there:
# `systemd-analyze verify` must be silent, the hardening score must stay low, the directives
# operators rely on must be present, and the sysusers.d file must create the user.
#
#   [FSDPD_BINARY=...] [FSDPD_WORKER_BINARY=...] systemd_units_test.sh BUILD_DIR CMAKE
#
# The binaries, when named and built, are what the installed units start; otherwise stand-in
# executables take their place, since verify only needs ExecStart to be executable.
set -euo pipefail

build_dir=${1:?usage: systemd_units_test.sh BUILD_DIR CMAKE}
cmake_command=${2:?usage: systemd_units_test.sh BUILD_DIR CMAKE}
fsdpd_binary=${FSDPD_BINARY:-}
worker_binary=${FSDPD_WORKER_BINARY:-}

for tool in systemd-analyze systemd-sysusers; do
  if ! command -v "$tool" >/dev/null; then
    echo "FAIL: $tool not found (Debian package systemd)" >&2
    exit 1
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

"$cmake_command" --install "$build_dir" --component deploy --prefix "$prefix" >"$work/install.log"
unit_dir=$prefix/lib/systemd/system
for file in lib/systemd/system/fsdpd.service lib/systemd/system/fsdpd-worker@.service \
  lib/sysusers.d/fsdpd.conf share/fsdpd/fsdpd.env share/fsdpd/fsdpd-worker.env \
  share/fsdpd/prometheus/prometheus.yml share/fsdpd/prometheus/rules/fsdpd.rules.yml \
  share/fsdpd/grafana/fsdpd.json; do
  [ -f "$prefix/$file" ] || fail "cmake --install did not install $file"
done
if [ ! -f "$unit_dir/fsdpd.service" ] || [ ! -f "$unit_dir/fsdpd-worker@.service" ]; then
  cat "$work/install.log" >&2
  exit 1
fi

# The installed units must start the binaries of the prefix they were installed to.
grep -qx "ExecStart=$prefix/bin/fsdpd --tokens-file \${CREDENTIALS_DIRECTORY}/tokens \$FSDPD_OPTIONS" \
  "$unit_dir/fsdpd.service" ||
  fail "installed fsdpd.service does not start $prefix/bin/fsdpd:" \
    "$(grep ^ExecStart= "$unit_dir/fsdpd.service")"
grep -q "^ExecStart=$prefix/bin/fsdpd-worker " "$unit_dir/fsdpd-worker@.service" ||
  fail "installed fsdpd-worker@.service does not start $prefix/bin/fsdpd-worker"
if grep -q /usr/local/bin "$unit_dir"/*.service; then
  fail "installed units still name /usr/local/bin"
fi

place_binary() {  # place_binary NAME BUILT_PATH
  local target=$prefix/bin/$1
  [ -x "$target" ] && return 0
  mkdir -p "$prefix/bin"
  if [ -n "$2" ] && [ -x "$2" ]; then
    ln -s "$2" "$target"
  else
    printf '#!/bin/sh\nexit 0\n' >"$target"
    chmod +x "$target"
  fi
}
place_binary fsdpd "$fsdpd_binary"
place_binary fsdpd-worker "$worker_binary"

# verify exits 0 on unknown keys and unparsable values, printing a warning instead, so any
# output at all counts as a failure.
verify_unit() {  # verify_unit UNIT_PATH → 0 when verify passes silently
  local output status=0
  output=$(cd "$(dirname "$1")" && systemd-analyze verify --man=no "./$(basename "$1")" 2>&1) ||
    status=$?
  if [ $status -ne 0 ] || [ -n "$output" ]; then
    echo "$output" >&2
    return 1
  fi
}

# A template is verified through an instance; the template file beside it is what is read.
verify_unit "$unit_dir/fsdpd.service" || fail "systemd-analyze verify fsdpd.service"
verify_unit "$unit_dir/fsdpd-worker@0.service" ||
  fail "systemd-analyze verify fsdpd-worker@0.service"

# The check above must be able to fail: a unit with a bad value and a missing binary.
broken=$work/broken
mkdir -p "$broken"
sed -e 's/^ProtectSystem=strict/ProtectSystem=everything/' "$unit_dir/fsdpd.service" \
  >"$broken/fsdpd.service"
if verify_unit "$broken/fsdpd.service" 2>/dev/null; then
  fail "verify_unit accepted ProtectSystem=everything"
fi
sed -e "s#^ExecStart=$prefix/bin/fsdpd #ExecStart=$work/missing/fsdpd #" \
  "$unit_dir/fsdpd.service" >"$broken/fsdpd.service"
if verify_unit "$broken/fsdpd.service" 2>/dev/null; then
  fail "verify_unit accepted an ExecStart binary that does not exist"
fi

# systemd's exposure score runs from 0 (locked down) to 10; thresholds are in tenths.
check_exposure() {  # check_exposure UNIT_PATH MAX_TENTHS
  local output
  if ! output=$(cd "$(dirname "$1")" &&
    systemd-analyze security --offline=true --threshold="$2" "./$(basename "$1")" 2>&1); then
    echo "$output" | tail -n 25 >&2
    fail "$(basename "$1"): exposure above $2/10 of systemd-analyze security's scale"
  fi
}
check_exposure "$unit_dir/fsdpd.service" 20
check_exposure "$unit_dir/fsdpd-worker@0.service" 30

require_line() {  # require_line UNIT_PATH LINE
  grep -qxF -- "$2" "$1" || fail "$(basename "$1") lacks '$2'"
}
coordinator=$unit_dir/fsdpd.service
for line in Type=notify WatchdogSec=30s Restart=on-failure User=fsdpd StateDirectory=fsdpd \
  ProtectSystem=strict ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes \
  EnvironmentFile=-/etc/fsdpd/fsdpd.env Environment=XDG_STATE_HOME=%S \
  LoadCredential=tokens:/etc/fsdpd/tokens CapabilityBoundingSet= WantedBy=multi-user.target; do
  require_line "$coordinator" "$line"
done
worker=$unit_dir/fsdpd-worker@.service
for line in Restart=on-failure User=fsdpd "StateDirectory=fsdpd-worker fsdpd-worker/data" \
  LoadCredential=worker-token:/etc/fsdpd/worker-token ProtectSystem=strict \
  ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes DevicePolicy=closed \
  "DeviceAllow=char-nvidia-frontend rw" "DeviceAllow=char-nvidia-uvm rw" \
  EnvironmentFile=-/etc/fsdpd/fsdpd-worker.env WantedBy=multi-user.target; do
  require_line "$worker" "$line"
done
grep -q -- '--device cuda:%i ' "$worker" ||
  fail "fsdpd-worker@.service does not pass --device cuda:%i"
grep -q -- '--token-file ${CREDENTIALS_DIRECTORY}/worker-token' "$worker" ||
  fail "fsdpd-worker@.service does not authenticate with its worker token"
grep -q -- '--allowed-root %S/fsdpd-worker/data' "$worker" ||
  fail "fsdpd-worker@.service does not confine job paths to its data folder"
if grep -q '^PrivateDevices=yes' "$worker"; then fail "PrivateDevices=yes hides /dev/nvidia*"; fi
if grep -q '^MemoryDenyWriteExecute=yes' "$worker"; then
  fail "MemoryDenyWriteExecute=yes breaks the CUDA driver's PTX compilation"
fi

# Every variable the env examples mention is read by the unit or by the daemon itself (the
# variables of the flags contract), so no example setting is silently ignored.
daemon_variables=" FSDPD_LISTEN FSDPD_METRICS_LISTEN FSDPD_STATE_DIR FSDPD_COORDINATOR "
for pair in "fsdpd.env:$coordinator" "fsdpd-worker.env:$worker"; do
  example=$prefix/share/fsdpd/${pair%%:*}
  unit=${pair#*:}
  while read -r variable; do
    [[ "$daemon_variables" == *" $variable "* ]] && continue
    grep -q "\$[{]\?$variable\b" "$unit" ||
      fail "${pair%%:*} sets $variable, which $(basename "$unit") never reads"
  done < <(sed -n 's/^#\?\([A-Z_]*\)=.*/\1/p' "$example" | sort -u)
done

# The sysusers.d file creates the fsdpd user and group in an empty root.
mkdir -p "$work/root/etc"
systemd-sysusers --root="$work/root" "$prefix/lib/sysusers.d/fsdpd.conf" >/dev/null 2>&1 ||
  fail "systemd-sysusers rejected fsdpd.conf"
grep -q '^fsdpd:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' "$work/root/etc/passwd" 2>/dev/null ||
  fail "systemd-sysusers did not create the fsdpd user"
grep -q '^fsdpd:x:' "$work/root/etc/group" 2>/dev/null ||
  fail "systemd-sysusers did not create the fsdpd group"

if [ $failures -ne 0 ]; then
  echo "systemd units: $failures failure(s)" >&2
  exit 1
fi
echo "systemd units: installed, verified and hardened as expected"
