#!/usr/bin/env bash
# Installs everything l0gc needs into ./.venv (and helm into ./.tools), from pinned
# versions in this repo. Idempotent: re-running with unchanged pins does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" - <<'PY' || { echo "l0gc needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2; exit 2; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY

stamp=.venv/.l0gc-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade "pip==25.3"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check \
        -c constraints.txt -e ".[dev,spark,bench]"
    echo "$want" > "$stamp"
fi

scripts/install-helm.sh
scripts/install-azurite.sh

# Prometheus and promtool from the machine's Debian packages: the alert rules' unit tests
# (promtool test rules) and a real Prometheus scraping a daemon and a publisher in the
# tests. Only when promtool is missing; apt-get needs root (CI runs this as root).
if ! command -v promtool >/dev/null 2>&1; then
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "promtool is missing: run 'apt-get install -y prometheus' as root" >&2; exit 1; }
        sudo="sudo"
    fi
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
    # The package may start a system Prometheus (its init script, or systemd): the tests
    # start their own on free ports, so stop that one service, and only it.
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
        $sudo systemctl disable --now prometheus
    elif [ -f /run/prometheus/prometheus.pid ] \
            && kill -0 "$(cat /run/prometheus/prometheus.pid)" 2>/dev/null; then
        $sudo service prometheus stop
    fi
fi
