#!/usr/bin/env bash
# Installs what ldpfleet needs on a fresh Debian-like machine: system packages (only those
# missing), then the Python package in editable mode with its test extras (builds the C kernels).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need_apt+=(mosquitto)
[ -f /usr/include/mosquitto.h ] || need_apt+=(libmosquitto-dev)
[ -f /usr/include/openssl/hmac.h ] || need_apt+=(libssl-dev)
[ -f /usr/include/cjson/cJSON.h ] || need_apt+=(libcjson-dev)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v make >/dev/null 2>&1 || need_apt+=(make)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "setup: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check -e ".[test]"
# The editable install builds the extension in place; make sure it is current.
$PY setup.py -q build_ext --inplace >/dev/null 2>&1 || $PY setup.py build_ext --inplace
echo "setup: ok"
