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
# headless Chromium and its WebDriver for the dashboard's browser test (tests/integration/test_dashboard.py)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
[ -x /usr/bin/chromedriver ] || need_apt+=(chromium-driver)
# promtool checks and unit-tests the alert rules of deploy/prometheus/ (tests/integration/test_alert_rules.py);
# Debian ships it in the prometheus package, whose server must not be left running (below)
# (without its recommended node exporter, another server)
need_apt_plain=()
command -v promtool >/dev/null 2>&1 || need_apt_plain+=(prometheus)
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
if [ $(( ${#need_apt[@]} + ${#need_apt_plain[@]} )) -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "setup: apt-get install ${need_apt[*]} ${need_apt_plain[*]}"
  $SUDO apt-get update -qq
  if [ ${#need_apt[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
  fi
  if [ ${#need_apt_plain[@]} -gt 0 ]; then
    # Its server must not start: a policy-rc.d that denies every start, for this install only
    # (kept if one was there), so the install also works where no systemd runs (containers);
    # the unit it enabled is disabled again, so it does not start at the next boot either.
    policy_rc=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy_rc" ]; then
      printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy_rc" >/dev/null
      $SUDO chmod 755 "$policy_rc"
      made_policy=1
    fi
    status=0
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${need_apt_plain[@]}" || status=$?
    if [ "$made_policy" = 1 ]; then $SUDO rm -f "$policy_rc"; fi
    [ "$status" = 0 ] || exit "$status"
    if command -v systemctl >/dev/null 2>&1; then  # works offline too (no systemd running)
      $SUDO systemctl disable prometheus.service >/dev/null 2>&1 || true
      if [ -d /run/systemd/system ]; then
        $SUDO systemctl stop prometheus.service >/dev/null 2>&1 || true
      fi
    fi
  fi
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
