#!/usr/bin/env bash
# Build the ldpfleet C client: checks its Debian build dependencies first.
#   device/c_client/build.sh [make arguments...]     e.g. BUILD=/tmp/x SANITIZE=1
# Missing packages are installed with apt-get when running as root (or with sudo) and either
# CI is set or LDPFLEET_APT=1; otherwise the exact apt-get line is printed and the build stops.
set -euo pipefail
cd "$(dirname "$0")"

packages=()
[ -f /usr/include/mosquitto.h ] || packages+=(libmosquitto-dev)
[ -f /usr/include/openssl/hmac.h ] || packages+=(libssl-dev)
[ -f /usr/include/cjson/cJSON.h ] || packages+=(libcjson-dev)
command -v make >/dev/null 2>&1 || packages+=(make)
command -v "${CC:-cc}" >/dev/null 2>&1 || packages+=(gcc)

if [ ${#packages[@]} -gt 0 ]; then
  line="apt-get install -y ${packages[*]}"
  if [ -n "${CI:-}" ] || [ "${LDPFLEET_APT:-0}" = 1 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "build.sh: $sudo $line"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo $line
  else
    echo "build.sh: missing build dependencies; run:" >&2
    echo "  sudo apt-get update && sudo $line" >&2
    exit 1
  fi
fi

exec make "$@"
