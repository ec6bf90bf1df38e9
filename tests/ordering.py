"""Longest tests first: the order the xdist workers take the tests in.

Two workers finish together only if the long tests do not come last: a 4-minute search
handed out when the other worker is nearly done leaves one core idle for 4 minutes.
`tests/durations.json` holds the measured seconds of every test that takes 2 s or more
(setup + call + teardown, from a whole-suite run); collection puts those first, longest
first, a group of `XDIST_GROUPS` (which runs on one worker in order) weighted by its
sum and kept together in its own order, then everything else in collection order.
A test missing from the file (new, renamed) only runs later; nothing is skipped.

Refresh the file after a whole-suite run that recorded its durations:

    L0GC_TEST_DURATIONS=tests/durations.json scripts/test.sh
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
RECORD_ENV = "L0GC_TEST_DURATIONS"
_KEEP_S = 2.0


def known_durations(path: Path = DURATIONS) -> dict[str, float]:
    """node id -> seconds, from the committed file (empty if it is missing)."""
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {str(k): float(v) for k, v in loaded.items()}


def longest_first(
    nodeids: list[str], durations: dict[str, float], group_of: Callable[[str], str | None]
) -> list[int]:
    """The indices of `nodeids` in run order: units (a test, or a whole group) by their
    known seconds, longest first; ties and unknown units in collection order."""
    weight: dict[str, float] = defaultdict(float)
    first: dict[str, int] = {}
    units = []
    for index, nodeid in enumerate(nodeids):
        unit = group_of(nodeid) or nodeid
        weight[unit] += durations.get(nodeid, 0.0)
        first.setdefault(unit, index)
        units.append(unit)
    return sorted(range(len(nodeids)), key=lambda i: (-weight[units[i]], first[units[i]], i))


class DurationRecorder:
    """On the controller (or a run without xdist): every test's setup + call + teardown
    seconds, written to `path` at the end, those of `_KEEP_S` or more."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self) -> None:
        kept = {k: round(v, 1) for k, v in sorted(self.seconds.items()) if v >= _KEEP_S}
        self.path.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n", encoding="utf-8")


def install_recorder(config: pytest.Config) -> None:
    """Record durations when `L0GC_TEST_DURATIONS` names a file (not on xdist workers:
    the controller sees every worker's reports)."""
    target = os.environ.get(RECORD_ENV)
    if target and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(Path(target)), "l0gc-durations")
