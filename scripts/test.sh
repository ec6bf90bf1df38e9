#!/usr/bin/env bash
# The test command: set-up, lint, type checks, tests. Extra args go to pytest,
# e.g. scripts/test.sh -m "not spark and not slow" for a quick local run.
# pytest runs on L0GC_TEST_WORKERS (default 2) xdist workers, each with its own
# servers; the Spark tests share one worker (XDIST_GROUPS in tests/conftest.py); `-n 0`
# among the extra args runs them in this process. mypy checks alongside the tests (they
# mostly wait on servers and subprocesses) and reports after them; either failing fails
# the command. docs/conventions.md, "The test suite".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/install-prometheus.sh --required  # the Prometheus tests need promtool (CI: apt-get)
echo "== ruff"; .venv/bin/ruff check .
mypy_log=$(mktemp)
.venv/bin/mypy >"$mypy_log" 2>&1 &
mypy_pid=$!
trap '[ -z "$mypy_pid" ] || kill "$mypy_pid" 2>/dev/null || true; rm -f "$mypy_log"' EXIT
echo "== pytest"
tests=0
.venv/bin/python -m pytest -n "${L0GC_TEST_WORKERS:-2}" --dist loadgroup --durations=25 "$@" \
    || tests=$?
types=0
wait "$mypy_pid" || types=$?
mypy_pid=""
echo "== mypy --strict"; cat "$mypy_log"
if [ "$tests" -ne 0 ]; then exit "$tests"; fi
exit "$types"
