#!/usr/bin/env bash
# The test command: set-up, lint, type checks, tests. Extra args go to pytest,
# e.g. scripts/test.sh -m "not spark and not slow" for a quick local run.
# pytest runs on L0GC_TEST_WORKERS (default 2) xdist workers, each with its own
# servers; the Spark tests share one worker (xdist_group, --dist loadgroup). `-n 0`
# among the extra args runs in one process. docs/conventions.md, "The test suite".
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
echo "== ruff"; .venv/bin/ruff check .
echo "== mypy --strict"; .venv/bin/mypy
echo "== pytest"
.venv/bin/python -m pytest -n "${L0GC_TEST_WORKERS:-2}" --dist loadgroup --durations=25 "$@"
