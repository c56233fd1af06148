#!/usr/bin/env bash
# Installs what ldpfleet needs on a fresh Debian/Ubuntu machine:
#   1. the system packages that are missing (only those), with apt-get;
#   2. a project virtual environment `.venv` made with the machine's own Python, so that a
#      distribution Python marked "externally managed" (PEP 668: Debian 12, Ubuntu 24.04) is
#      never pip-installed into;
#   3. ldpfleet in that venv in editable mode with its extras (builds the C kernels).
# Use it afterwards with `. .venv/bin/activate` (or call .venv/bin/ldpfleet directly).
set -euo pipefail
cd "$(dirname "$0")/.."

# The interpreter the venv is made from: $PYTHON, else the first python3 on PATH.
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "setup: no $PY on PATH; installing Debian's python3"
  need_py=1
else
  need_py=0
fi

need_apt=()
[ "$need_py" = 1 ] && need_apt+=(python3 python3-venv python3-dev)
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need_apt+=(mosquitto)
[ -f /usr/include/mosquitto.h ] || need_apt+=(libmosquitto-dev)
[ -f /usr/include/openssl/evp.h ] || need_apt+=(libssl-dev)
[ -f /usr/include/cjson/cJSON.h ] || need_apt+=(libcjson-dev)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v make >/dev/null 2>&1 || need_apt+=(make)
# headless Chromium and its WebDriver for the dashboard's browser test (tests/test_dashboard.py)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
if [ "$need_py" = 0 ]; then
  # `python3 -m venv` needs ensurepip (Debian: python3-venv, or python3.X-venv for the
  # interpreter's own minor version); building the cffi extension needs Python.h (python3-dev).
  pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    need_apt+=(python3-venv "python${pyver}-venv")
  fi
  if ! "$PY" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' >/dev/null 2>&1; then
    need_apt+=(python3-dev "python${pyver}-dev")
  fi
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "setup: apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

# A venv whose interpreter is gone (the Python it was made from was removed or upgraded) is
# made again rather than half-used.
if [ -d "$VENV" ] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  echo "setup: $VENV is broken (its Python is gone); making it again"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV with $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --disable-pip-version-check --upgrade "pip>=23" >/dev/null 2>&1 || true
"$VPY" -m pip install -q --disable-pip-version-check -e ".[test]"
# The editable install builds the extension in place; make sure it is current.
"$VPY" setup.py -q build_ext --inplace >/dev/null 2>&1 || "$VPY" setup.py build_ext --inplace
echo "setup: ok ($VENV; activate with: . $VENV/bin/activate)"
