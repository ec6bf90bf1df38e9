#!/usr/bin/env bash
# The test command: set-up, lint, type checks, tests. Extra args go to pytest,
# e.g. scripts/test.sh -m "not spark and not slow" for a quick local run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/install-prometheus.sh --required  # the Prometheus tests need promtool (CI: apt-get)
echo "== ruff"; .venv/bin/ruff check .
echo "== mypy --strict"; .venv/bin/mypy
echo "== pytest"; .venv/bin/python -m pytest "$@"
