#!/usr/bin/env bash
# Installs everything l0gc needs into ./.venv (and helm into ./.tools), from pinned
# versions in this repo. Idempotent: re-running with unchanged pins does nothing.
# `bootstrap.sh --demo`: only what `gcd demo` needs (the venv), on any machine.
# The venv holds l0gc and, beside it, its lab (l0lab/: the demo, the simulation, chaos,
# local servers; a distribution of its own, not in the l0gc wheel), both editable.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
"$PYTHON" - <<'PY' || { echo "l0gc needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2; exit 2; }
import sys
sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY

stamp=.venv/.l0gc-installed
pins=$(cat pyproject.toml l0lab/pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
# `--demo` installs what `gcd demo` runs on (l0gc and its lab: ~570 MB, under a minute
# here); the tests also need the dev, spark and bench extras (~1.8 GB with PySpark). A
# full install serves the demo too.
if [ "${1:-}" = "--demo" ]; then mode=demo; extras=""; else mode=full; extras="[dev,spark,bench]"; fi
have=$(cat "$stamp" 2>/dev/null || true)
if [ "$have" != "$pins full" ] && [ "$have" != "$pins $mode" ]; then
    echo "bootstrap: installing l0gc${extras} and its pinned dependencies into .venv with" \
         "$("$PYTHON" -c 'import sys; print("Python", sys.version.split()[0])')" \
         "($([ $mode = demo ] && echo "about a minute" || echo "a few minutes the first time; PySpark is the largest"))" >&2
    [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade "pip==25.3"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check \
        -c constraints.txt -e ".${extras}" -e ./l0lab
    echo "$pins $mode" > "$stamp"
    echo "bootstrap: .venv ready" >&2
fi

# The demo (`make demo`, `bootstrap.sh --demo`) needs only the venv above: Python 3.11,
# no root, no apt-get. The tests also need helm, Azurite (npm) and promtool (apt-get:
# skipped with one line where that is impossible; `make test` requires it).
[ "${1:-}" = "--demo" ] && exit 0

scripts/install-helm.sh
scripts/install-azurite.sh
scripts/install-prometheus.sh
scripts/install-etcd.sh
