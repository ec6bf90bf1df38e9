"""The I/O of one `gcd scrub` run: read etcd, HEAD every referenced key, ask the journal
about the missing ones, list the root; `gcd.scrub.findings` decides what each answer means.

Every request to the store goes through one token bucket (`max_requests_per_second`,
low by default: a scrub shares the bucket with production) and has a deadline. Order of
a run, and why (docs/scrub.md):

1. one read of the partition records and one of M (etcd);
2. one one-key LIST of the root: a missing bucket or root fails the run here, before
   any HEAD could call every key "missing";
3. one HEAD per referenced key, `concurrency` in flight; the unknown ones are HEADed once
   more after the others (a store's bad second is not reported);
4. the missing keys are checked against the records read again: a key no longer
   referenced was released meanwhile and rightly deleted (not a finding);
5. the journal is searched for the missing keys that remain;
6. M's history and one listing of the root give stranded and unparsable keys.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gcd.journal.search import SegmentSource, search_journal
from gcd.rules.layout import KeyLayout
from gcd.scrub.findings import (
    HeadAnswer,
    HeadVerdict,
    ListingTally,
    MissingKey,
    SilentPartition,
    StrandedRule,
    UnknownKey,
    missing_key,
    silent_partition,
    stranded_rule,
    verdict,
)
from gcd.scrub.head import Head, head_of, timed
from gcd.scrub.report import ScrubReport
from gcd.storage.objectstore import BucketStore, ObjectInfo
from gcd.storage.ratelimit import TokenBucket
from gcd.undo.mhistory import MHistory
from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import Reference, References, merge
from l0gc.errors import InvalidRecord
from l0gc.etcd.store import WatermarkStore

__all__ = ["ScrubSettings", "Scrubber"]


@dataclass(frozen=True, slots=True)
class ScrubSettings:
    """How a run goes (the flags of `gcd scrub`)."""

    max_requests_per_second: float = 50.0
    head_deadline_s: float = 10.0
    concurrency: int = 8
    stranded_after_s: float = 3600.0
    silent_after_s: float = 3600.0
    examples: int = 10
    listing: bool = True
    """List the root (stranded and unparsable keys); False: HEAD the references only."""


@dataclass(slots=True)
class _Counts:
    head: int = 0
    list: int = 0


class Scrubber:
    """Runs scrubs of one namespace and store; each `run` is independent."""

    def __init__(
        self,
        watermarks: WatermarkStore,
        objects: BucketStore,
        layout: KeyLayout,
        *,
        store_name: str,
        journal: SegmentSource | None = None,
        settings: ScrubSettings | None = None,
        head: Head | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.watermarks = watermarks
        self.objects = objects
        self.layout = layout
        self.store_name = store_name
        self.journal = journal
        self.settings = settings or ScrubSettings()
        self._head = timed(head or head_of(objects), self.settings.head_deadline_s)
        self._clock = clock
        self._pace = TokenBucket(self.settings.max_requests_per_second)
        self.requests = _Counts()
        """Requests sent to the store over the scrubber's life (the metrics' totals)."""

    async def run(self) -> ScrubReport:
        """One scrub; raises StorageError when the root cannot be listed at all, and
        EtcdUnavailable when etcd cannot be read."""
        at, started = self._clock(), time.monotonic()
        heads, lists = self.requests.head, self.requests.list
        records = await self.watermarks.list_partitions()
        safe = await self.watermarks.read_safe_epoch()
        references = _references(records)
        await self._list_page(None, max_keys=1)
        answers = await self._head_all(list(references))
        retry = [key for key, answer in answers.items() if verdict(answer) is HeadVerdict.UNKNOWN]
        answers.update(await self._head_all(retry))
        gone = [key for key, answer in answers.items() if verdict(answer) is HeadVerdict.MISSING]
        still: Mapping[str, Reference] = {}
        if gone:
            still = _references(await self.watermarks.list_partitions())
        kept = [key for key in gone if key in still]
        missing = await self._explain([still[key] for key in kept])
        unknown = tuple(
            UnknownKey(references[key], answer.code or "Unknown", answer.detail)
            for key, answer in answers.items()
            if verdict(answer) is HeadVerdict.UNKNOWN
        )
        rule, note = await self._stranded_rule(safe.safe_epoch, at)
        listing = None
        if self.settings.listing:
            listing = ListingTally(
                self.layout, rule, frozenset(references), examples=self.settings.examples
            )
            await self._list_root(listing)
        silent, invalid = _partitions(records, safe.cluster_epoch, at, self.settings.silent_after_s)
        return ScrubReport(
            namespace=self.watermarks.namespace,
            store=self.store_name,
            at=at,
            duration_s=time.monotonic() - started,
            safe_epoch=safe.safe_epoch,
            cluster_epoch=safe.cluster_epoch,
            partitions=len(records),
            referencing=sum(
                1
                for r in records.values()
                if isinstance(r, PartitionRecord) and r.references is not None
            ),
            referenced=len(references),
            present=sum(1 for a in answers.values() if verdict(a) is HeadVerdict.PRESENT),
            missing=missing,
            unknown=unknown,
            released=len(gone) - len(kept),
            journal=None if self.journal is None else self.journal.describe(),
            stranded_rule=rule,
            stranded_note=note,
            listing=listing,
            silent=silent,
            invalid=invalid,
            head_requests=self.requests.head - heads,
            list_requests=self.requests.list - lists,
        )

    async def _head_all(self, keys: list[str]) -> dict[str, HeadAnswer]:
        """One HEAD per key, `concurrency` in flight, paced."""
        answers: dict[str, HeadAnswer] = {}
        queue = iter(keys)

        async def worker() -> None:
            for key in queue:
                await self._pace.acquire()
                self.requests.head += 1
                answers[key] = await self._head(key)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(self.settings.concurrency, len(keys))):
                group.create_task(worker())
        return {key: answers[key] for key in keys}

    async def _explain(self, gone: list[Reference]) -> tuple[MissingKey, ...]:
        """Each missing key joined with the journal's answer."""
        epochs = {}
        for reference in gone:
            parsed = self.layout.parse(reference.key)
            epochs[reference.key] = None if parsed is None else parsed.epoch
        if self.journal is None or not gone:
            return tuple(missing_key(r, epochs[r.key], None) for r in gone)
        hits = await search_journal(self.journal, epochs)
        return tuple(missing_key(r, epochs[r.key], hits.deletions.get(r.key, [])) for r in gone)

    async def _stranded_rule(
        self, current: int | None, now: float
    ) -> tuple[StrandedRule | None, str | None]:
        """This run's stranded rule from M's history, or why there is none."""
        history = MHistory(self.watermarks.kv, self.watermarks.namespace, 0.0)
        try:
            entries = await history.read()
        except InvalidRecord as exc:
            return None, f"M's history cannot be read ({exc}): stranded garbage not checked"
        found = stranded_rule(entries, current, now, self.settings.stranded_after_s)
        if isinstance(found, str):
            return None, found
        return found, None

    async def _list_page(
        self, token: str | None, max_keys: int = 1000
    ) -> tuple[str | None, list[ObjectInfo]]:
        await self._pace.acquire()
        self.requests.list += 1
        page = await self.objects.list_page(
            self.layout.listing_root, continuation_token=token, max_keys=max_keys
        )
        return page.next_token, list(page.objects)

    async def _list_root(self, tally: ListingTally) -> None:
        """Every key under the root, one page after the other, each judged by `tally`."""
        token: str | None = None
        while True:
            token, objects = await self._list_page(token)
            for info in objects:
                tally.add(info.key, info.size, info.last_modified_s)
            if token is None:
                return


def _references(records: Mapping[str, PartitionRecord | InvalidRecord]) -> dict[str, Reference]:
    """Every referenced key of the readable records, with its first reference."""
    by_partition: dict[str, References] = {
        name: record.references
        for name, record in records.items()
        if isinstance(record, PartitionRecord) and record.references is not None
    }
    return merge(by_partition)


def _partitions(
    records: Mapping[str, PartitionRecord | InvalidRecord],
    cluster_epoch: int | None,
    now: float,
    after_s: float,
) -> tuple[tuple[SilentPartition, ...], tuple[tuple[str, str], ...]]:
    """The silent partitions and the unreadable records, by name."""
    silent: list[SilentPartition] = []
    invalid: list[tuple[str, str]] = []
    for name in sorted(records):
        record = records[name]
        if isinstance(record, InvalidRecord):
            invalid.append((name, str(record)))
            continue
        found = silent_partition(record, cluster_epoch, now, after_s)
        if found is not None:
            silent.append(found)
    return tuple(silent), tuple(invalid)
