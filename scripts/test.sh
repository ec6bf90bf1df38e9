#!/usr/bin/env bash
# The test command, in two tiers (docs/conventions.md, "Two tiers"):
#   scripts/test.sh [ARGS]         the everyday tier (`make test`): set-up, ruff, mypy --strict
#                                  and every test not marked `deep`, in 15 minutes at most
#   scripts/test.sh --deep [ARGS]  the deep tier (`make test-deep`): set-up and the tests
#                                  marked `deep` (random seeds, soaks, larger scopes, bench)
# ARGS go to pytest, e.g. scripts/test.sh -m "not spark and not slow" for a quick local run.
# pytest runs on L0GC_TEST_WORKERS (default 3) xdist workers, each with its own
# servers: most tests wait on servers and subprocesses, so a third worker keeps the 2
# cores busy (docs/conventions.md); the Spark tests share one worker (XDIST_GROUPS in
# tests/conftest.py); `-n 0` among ARGS runs them in this process. mypy checks alongside the tests (they mostly
# wait on servers and subprocesses) and reports after them; either failing fails the
# command. The set-up and test times are printed apart at the end, after the 25 slowest.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=everyday
if [ "${1:-}" = "--deep" ]; then tier=deep; shift; fi
began=$SECONDS
scripts/bootstrap.sh
scripts/install-prometheus.sh --required  # the Prometheus tests need promtool (CI: apt-get)
scripts/install-etcd.sh --required  # the etcd clusters need a crash-safe etcd (CI: apt-get download)
if [ "$tier" = deep ]; then
    scripts/install-chromium.sh --required  # the M picture in a real browser (CI: apt-get)
fi
setup_s=$((SECONDS - began))
began=$SECONDS
mypy_pid=""
mypy_log=$(mktemp)
trap '[ -z "$mypy_pid" ] || kill "$mypy_pid" 2>/dev/null || true; rm -f "$mypy_log"' EXIT
if [ "$tier" = everyday ]; then
    echo "== ruff"; .venv/bin/ruff check . && .venv/bin/ruff format --check .
    .venv/bin/mypy >"$mypy_log" 2>&1 &
    mypy_pid=$!
fi
echo "== pytest ($tier tier)"
tests=0
.venv/bin/python -m pytest -n "${L0GC_TEST_WORKERS:-3}" --dist loadgroup --durations=25 \
    --tier "$tier" "$@" || tests=$?
types=0
if [ -n "$mypy_pid" ]; then
    wait "$mypy_pid" || types=$?
    mypy_pid=""
    echo "== mypy --strict"; cat "$mypy_log"
fi
echo "== times ($tier tier): set-up ${setup_s} s, tests $((SECONDS - began)) s"
if [ "$tests" -ne 0 ]; then exit "$tests"; fi
exit "$types"
