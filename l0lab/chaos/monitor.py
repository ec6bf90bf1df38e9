"""Watching a chaos run while it goes: M, the sweepers, the journal, the first loss.

Every `every_s` the monitor reads the global M from etcd (one read at one revision,
as a sweeper does), scrapes each sweeper's /metrics, tails the deletion journal and the
writers' histories, and judges each new deletion against what the reconcilers know
(`l0lab.chaos.checker.Ledger.judge`'s rule, on the partial history). It is an early
alarm and a source of timings; the verdict is the checker's, over the complete history.

`wait_recovery` is how the nemesis knows a fault is over: after the heal, M must
advance, every partition must commit a write, and every sweeper must finish a round
that was not blocked.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from l0gc.errors import L0gcError
from l0lab.chaos.cluster import Cluster
from l0lab.chaos.reconciler import Reconcilers
from l0lab.chaos.records import Tail

__all__ = ["Monitor", "Sample"]

_log = structlog.get_logger("gcd.chaos")
_SAFE_EPOCH = re.compile(r"^l0gc_sweeper_safe_epoch ([0-9.e+]+)$", re.MULTILINE)
_ROUNDS = re.compile(r'^l0gc_sweeper_rounds_total\{outcome="(\w+)"\} ([0-9.e+]+)$', re.MULTILINE)
_UNBLOCKED = frozenset({"ok", "partial", "idle"})
_PENDING_S = 60.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of etcd."""

    at: float
    safe_epoch: int | None
    cluster_epoch: int | None
    blocked_reason: str | None
    pinned_by: tuple[str, ...]


@dataclass(slots=True)
class _Pending:
    key: str
    began_at: float
    seen_at: float


@dataclass(slots=True)
class Monitor:
    """See the module docstring."""

    cluster: Cluster
    reconcilers: Reconcilers
    every_s: float = 0.25
    samples: list[Sample] = field(default_factory=list)
    sweeper_rounds: dict[int, float] = field(default_factory=dict)
    sweeper_progress_at: dict[int, float] = field(default_factory=dict)
    sweeper_scraped_at: dict[int, float] = field(default_factory=dict)
    """When each sweeper's /metrics last answered (a stuck sweeper's note says)."""
    sweeper_outcomes: dict[int, dict[str, int]] = field(default_factory=dict)
    """Each sweeper's rounds by outcome at its last answer."""
    deleted: int = 0
    first_loss: str | None = None
    sweeper_m: dict[tuple[int, int], int] = field(default_factory=dict)
    """The highest M each sweeper process (index, start number) has used."""
    m_regressions: list[str] = field(default_factory=list)
    _journal_tails: dict[Path, Tail] = field(default_factory=dict)
    _history_tails: dict[Path, Tail] = field(default_factory=dict)
    _befores: dict[tuple[str, Any], float] = field(default_factory=dict)
    _pending: list[_Pending] = field(default_factory=list)
    _index: dict[str, tuple[str, int]] = field(default_factory=dict)
    _indexed: dict[str, int] = field(default_factory=dict)

    @property
    def latest(self) -> Sample | None:
        """The last reading."""
        return self.samples[-1] if self.samples else None

    def m_samples(self) -> list[tuple[float, int]]:
        """(time, M) of every reading where M was defined."""
        return [(s.at, s.safe_epoch) for s in self.samples if s.safe_epoch is not None]

    async def _read_m(self) -> None:
        assert self.cluster.store is not None
        now = time.time()
        try:
            read = await asyncio.wait_for(self.cluster.store.read_safe_epoch(), 2.0)
        except (L0gcError, OSError, TimeoutError) as exc:
            self.samples.append(Sample(now, None, None, f"etcd unreachable: {exc}", ()))
            return
        pinned = tuple(record.partition for record in read.pinning)
        self.samples.append(
            Sample(now, read.safe_epoch, read.cluster_epoch, read.blocked_reason, pinned)
        )

    async def _scrape(self, session: aiohttp.ClientSession) -> None:
        async def one(index: int, start: int, url: str) -> None:
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=1)) as response:
                    text = await response.text()
            except (aiohttp.ClientError, TimeoutError):
                return
            outcomes = {outcome: int(float(value)) for outcome, value in _ROUNDS.findall(text)}
            self.sweeper_scraped_at[index] = time.time()
            self.sweeper_outcomes[index] = outcomes
            rounds = sum(n for outcome, n in outcomes.items() if outcome in _UNBLOCKED)
            if rounds and rounds != self.sweeper_rounds.get(index):
                self.sweeper_rounds[index] = rounds
                self.sweeper_progress_at[index] = time.time()
            self._check_sweeper_m(index, start, _SAFE_EPOCH.search(text))

        await asyncio.gather(
            *(one(s.index, s.child.starts, s.metrics_url) for s in self.cluster.sweepers)
        )

    def _check_sweeper_m(self, index: int, start: int, found: re.Match[str] | None) -> None:
        """The M a sweeper process uses must never go down (NaN: blocked, no M)."""
        if found is None or not math.isfinite(value := float(found.group(1))):
            return
        m, key = int(value), (index, start)
        highest = self.sweeper_m.get(key)
        if highest is not None and m < highest:
            self.m_regressions.append(
                f"sweeper {index} (start {start}) used M = {m} after M = {highest}"
            )
        self.sweeper_m[key] = m if highest is None else max(highest, m)

    def _tail_files(
        self, tails: dict[Path, Tail], directory: Path, pattern: str
    ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for path in sorted(directory.glob(pattern)):
            tail = tails.setdefault(path, Tail(path))
            found.extend(tail.read())
        return found

    def _index_keys(self) -> None:
        for name, feed in self.reconcilers.feeds.items():
            start = self._indexed.get(name, 0)
            for offset in range(start, feed.log.next_offset):
                entry = feed.log.entries.get(offset)
                if entry is None:
                    break
                self._index[entry.key] = (name, offset)
                self._indexed[name] = offset + 1

    def _judge(self, key: str, began_at: float) -> str:
        found = self._index.get(key)
        if found is None:
            return "pending"
        name, offset = found
        feed = self.reconcilers.feeds[name]
        entry = feed.log.entries[offset]
        if entry.resolved is None:
            return "pending"
        if not entry.committed:
            return "safe"
        throughs = [through for through, _ in feed.lifts]
        index = bisect.bisect_left(throughs, offset)
        lifted = feed.lifts[index][1] if index < len(throughs) else None
        return "loss" if lifted is None or lifted > began_at else "safe"

    def _check_deletions(self) -> None:
        now = time.time()
        for doc in self._tail_files(self._journal_tails, self.cluster.journal_dir, "journal-*"):
            sweeper = str(doc.get("sweeper"))
            if doc.get("type") == "before":
                self._befores[(sweeper, doc.get("request"))] = float(doc["at"])
            elif doc.get("type") == "after":
                began = self._befores.pop((sweeper, doc.get("request")), float(doc["at"]))
                for key in doc.get("deleted") or ():
                    self.deleted += 1
                    self._pending.append(_Pending(str(key), began, now))
        for doc in self._tail_files(
            self._history_tails, self.cluster.run_dir / "history", "writer-*.jsonl"
        ):
            if doc.get("op") == "fencing_violation" and self.first_loss is None:
                self.first_loss = (
                    f"fencing violation on {doc.get('partition')} at epoch {doc.get('epoch')}"
                )
        self._index_keys()
        still: list[_Pending] = []
        for pending in self._pending:
            verdict = self._judge(pending.key, pending.began_at)
            if verdict == "loss" and self.first_loss is None:
                self.first_loss = f"live object deleted: {pending.key}"
                _log.error("chaos.live_object_deleted", key=pending.key)
            elif verdict == "pending" and now - pending.seen_at < _PENDING_S:
                still.append(pending)
        self._pending = still

    async def run(self, stop: asyncio.Event) -> None:
        """Sample until `stop`."""
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                await asyncio.gather(self._read_m(), self._scrape(session))
                self.reconcilers.poll()
                self._check_deletions()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.every_s)

    def m_now(self) -> int | None:
        """The last defined M."""
        for sample in reversed(self.samples):
            if sample.safe_epoch is not None:
                return sample.safe_epoch
        return None

    async def wait_recovery(
        self,
        healed_at: float,
        m_at_heal: int | None,
        bound_s: float,
        stop: asyncio.Event | None = None,
    ) -> tuple[float | None, float | None, str]:
        """(recovered_at, m_advanced_at, what is missing) after a heal; waits at most `bound_s`."""
        deadline = healed_at + bound_s
        m_advanced_at: float | None = None
        missing = ""
        while True:
            if m_advanced_at is None:
                m_advanced_at = next(
                    (
                        s.at
                        for s in self.samples
                        if s.at > healed_at and _above(s.safe_epoch, m_at_heal)
                    ),
                    None,
                )
            quiet = [
                name
                for name, feed in self.reconcilers.feeds.items()
                if (feed.last_commit_at or 0.0) <= healed_at
            ]
            stuck = [
                s.index
                for s in self.cluster.sweepers
                if self.sweeper_progress_at.get(s.index, 0.0) <= healed_at
            ]
            if m_advanced_at is not None and not quiet and not stuck:
                return time.time(), m_advanced_at, ""
            missing = "; ".join(
                part
                for part in (
                    "" if m_advanced_at is not None else f"M did not advance past {m_at_heal}",
                    f"no commit on {', '.join(quiet)}" if quiet else "",
                    f"no unblocked round of sweeper {stuck} ({self._sweepers_seen(stuck)})"
                    if stuck
                    else "",
                )
                if part
            )
            stopped = stop is not None and stop.is_set()
            if time.time() >= deadline or self.first_loss is not None or stopped:
                return None, m_advanced_at, missing
            await asyncio.sleep(self.every_s)

    def _sweepers_seen(self, indexes: list[int]) -> str:
        """What the stuck sweepers' /metrics said last, for the note of a failed recovery."""
        now = time.time()
        seen = []
        for index in indexes:
            at = self.sweeper_scraped_at.get(index)
            outcomes = sorted(self.sweeper_outcomes.get(index, {}).items())
            rounds = ", ".join(f"{outcome} {n}" for outcome, n in outcomes) or "none"
            said = (
                "/metrics never answered"
                if at is None
                else f"/metrics answered {now - at:.1f} s ago, rounds {rounds}"
            )
            seen.append(f"sweeper {index}: {said}")
        return "; ".join(seen)


def _above(value: int | None, floor: int | None) -> bool:
    """True when `value` is defined and above `floor` (any defined value if `floor` is None)."""
    return value is not None and (floor is None or value > floor)
