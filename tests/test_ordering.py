"""The run order of the suite (`tests.ordering`): long units first, groups kept together,
durations recorded in the committed file's format."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from tests.ordering import DurationRecorder, known_durations, longest_first


def _group(nodeid: str) -> str | None:
    return "g" if nodeid.startswith("g/") else None


def test_long_units_come_first_and_a_group_stays_together_in_its_order() -> None:
    ids = ["a", "g/1", "b", "g/2", "c", "d"]
    durations = {"a": 5.0, "g/1": 4.0, "g/2": 3.0, "c": 60.0}  # group sums to 7
    order = [ids[i] for i in longest_first(ids, durations, _group)]
    assert order == ["c", "g/1", "g/2", "a", "b", "d"]


def test_without_durations_the_collection_order_stays() -> None:
    ids = ["x", "g/1", "y", "g/2"]
    assert [ids[i] for i in longest_first(ids, {}, _group)] == ["x", "g/1", "g/2", "y"]


def test_recorded_durations_sum_the_phases_and_keep_the_long_ones(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    recorder = DurationRecorder(path)
    for nodeid, seconds in [("t::slow", 1.5), ("t::slow", 1.0), ("t::fast", 0.3)]:
        recorder.pytest_runtest_logreport(
            cast(pytest.TestReport, SimpleNamespace(nodeid=nodeid, duration=seconds))
        )
    recorder.pytest_sessionfinish()
    assert json.loads(path.read_text()) == {"t::slow": 2.5}
    assert known_durations(path) == {"t::slow": 2.5}
    assert known_durations(tmp_path / "missing.json") == {}
