"""The reconcilers of a chaos run: one per partition, lagging, sometimes stalled.

A reconciler is what lifts a partition's data out of L0 (into long-term storage) and
then tells the partition's publisher that every entry through an offset is done. Here
each one tails its partition log (`l0lab.chaos.records`), *lifts* the committed entries
`lag_s` after their commit (aborted entries need no lifting, unresolved ones stop it),
records the lift in its history, and only then reports it: POST ``reconciled`` to the
partition's current owner with a reconciler token. An object is garbage from the
moment its lift is recorded; a report that fails is sent again later (the publisher
only learns late, which delays GC and never endangers data).

A stall (the ``reconciler-stall`` fault) freezes one partition's lifting; `catch_up`
lifts everything resolved at once, ignoring lag and stalls (before a partition moves,
and at the end of a run).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import structlog

from l0lab.chaos.owners import Owners
from l0lab.chaos.records import History, PartitionLog, Tail, log_path

__all__ = ["PartitionFeed", "Reconcilers"]

_log = structlog.get_logger("gcd.chaos")
_IDLE_REPORT_S = 1.0
"""How often a reconciler reports a partition with nothing new lifted."""


@dataclass(slots=True)
class PartitionFeed:
    """What one reconciler knows of its partition's log."""

    name: str
    log: PartitionLog
    tail: Tail
    lifted_through: int = -1
    reported_through: int = -1
    stalled: bool = False
    log_end_wanted: bool = False
    """The owner's last answer asked for the log end (it does not know where it is)."""
    reported_at: float = 0.0
    last_commit_at: float | None = None
    lifts: list[tuple[int, float]] = field(default_factory=list)

    def poll(self) -> None:
        """Read what the writer appended since the last poll."""
        for doc in self.tail.read():
            self.log.apply(doc)
            if doc.get("op") == "commit":
                at = float(doc["t"])
                if self.last_commit_at is None or at > self.last_commit_at:
                    self.last_commit_at = at

    def liftable(self, horizon: float) -> int:
        """The highest offset through which every entry is resolved, and every committed
        one was committed at or before `horizon`."""
        through = self.lifted_through
        for offset in range(self.lifted_through + 1, self.log.next_offset):
            entry = self.log.entries.get(offset)
            if entry is None:
                break  # not read yet
            if entry.resolved is None:
                break
            if entry.committed and (entry.resolved_at or 0.0) > horizon:
                break
            through = offset
        return through


class Reconcilers:
    """Every partition's reconciler (see the module docstring)."""

    def __init__(
        self,
        run_dir: Path,
        partitions: Iterable[str],
        *,
        route: Callable[[str], str],
        token: str,
        history: History,
        lag_s: float,
        replicas: Sequence[str] = (),
    ) -> None:
        self.feeds = {
            name: PartitionFeed(
                name, PartitionLog(log_path(run_dir, name)), Tail(log_path(run_dir, name))
            )
            for name in partitions
        }
        self._owners = Owners(route, {"Authorization": f"Bearer {token}"}, replicas)
        self._history = history
        self.lag_s = lag_s
        self.session: aiohttp.ClientSession | None = None

    def stall(self, partition: str, stalled: bool) -> None:
        """Stop (or resume) lifting `partition`."""
        self.feeds[partition].stalled = stalled

    def poll(self) -> None:
        """Read every partition log's new lines."""
        for feed in self.feeds.values():
            feed.poll()

    def _lift(self, feed: PartitionFeed, horizon: float) -> None:
        through = feed.liftable(horizon)
        if through > feed.lifted_through:
            at = self._history.write("lift", partition=feed.name, through=through)
            feed.lifted_through = through
            feed.lifts.append((through, at))

    async def _report(self, feed: PartitionFeed) -> bool:
        """Tell the owner; True once it has everything lifted. As docs/integration.md
        says, an idle partition is reported too (every `_IDLE_REPORT_S`), and the log
        end goes along only when the owner's last answer asked for it (read now, after
        that answer): that is how an idle partition moves on after its owner crashed."""
        caught_up = feed.reported_through >= feed.lifted_through
        idle_due = time.monotonic() - feed.reported_at >= _IDLE_REPORT_S
        if caught_up and not feed.log_end_wanted and not idle_due:
            return True
        assert self.session is not None
        through = feed.lifted_through
        body: dict[str, int] = {"offset": through}
        if feed.log_end_wanted:
            body["log_end_offset"] = feed.log.next_offset - 1
        try:
            status, answer, _ = await self._owners.request(
                self.session,
                "POST",
                feed.name,
                "/reconciled",
                body,
                timeout_s=2.0,
                patience_s=2.0,
            )
        except (aiohttp.ClientError, TimeoutError):
            return caught_up
        ok = status == 200
        if ok:
            feed.reported_through = max(feed.reported_through, through)
            feed.reported_at = time.monotonic()
            feed.log_end_wanted = answer.get("log_end_wanted") is True
        return ok or caught_up

    async def step(self) -> None:
        """One pass: poll, lift what is due, report."""
        self.poll()
        horizon = time.time() - self.lag_s
        for feed in self.feeds.values():
            if not feed.stalled:
                self._lift(feed, horizon)
        await asyncio.gather(*(self._report(feed) for feed in self.feeds.values()))

    async def catch_up(self, partitions: Iterable[str], timeout_s: float = 30.0) -> bool:
        """Lift everything resolved in `partitions` now and report it; False on timeout."""
        names = list(partitions)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            feeds = [self.feeds[name] for name in names]
            for feed in feeds:
                self._lift(feed, float("inf"))
            done = await asyncio.gather(*(self._report(feed) for feed in feeds))
            settled = all(f.liftable(float("inf")) == f.lifted_through for f in feeds)
            if all(done) and settled:
                return True
            await asyncio.sleep(0.1)
        return False

    async def run(self, stop: asyncio.Event, every_s: float = 0.2) -> None:
        """Step until `stop` (`session` must be set)."""
        while not stop.is_set():
            try:
                await self.step()
            except OSError as exc:
                _log.warning("chaos.reconciler_failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
