"""Listing one round's prefixes: concurrent streams of LIST pages, each one page ahead.

Design notes: docs/internals/sweep.md, `gcd.sweep.listing`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import NamedTuple

import structlog

from gcd.observe.telemetry import LIST_SENT, ListFailed
from gcd.rules.cursor import (
    Cursor,
    Skip,
    can_skip,
    first_page_size,
    next_cursor,
    next_page_size,
    skip,
)
from gcd.rules.layout import KeyLayout
from gcd.rules.listgrowth import ListerGrowth
from gcd.rules.listguard import ListingGuard
from gcd.rules.listsplit import ListRange, narrow
from gcd.storage.objectstore import ListPage, ObjectStore, VersionedStore
from gcd.storage.retry import Retrier, deadline
from gcd.sweep.binding import CLAIM_MAX_BYTES
from gcd.sweep.brake import Brake
from gcd.sweep.pages import PageDecider
from gcd.sweep.roundstate import BatchQueue, RoundSettings, RoundState
from l0gc.errors import StorageError
from l0gc.events import Hook

__all__ = ["RoundLister"]

log = structlog.get_logger("gcd.sweeper")


class _Ahead(NamedTuple):
    """A LIST sent ahead (still in flight, or answered and not read yet): its prefix,
    cursor and size."""

    prefix: str
    cursor: Cursor
    size: int
    task: asyncio.Task[ListPage]


@dataclass(eq=False)
class RoundLister:
    """Lists the prefixes of one round (`run`) and feeds each page to `decider`."""

    run: RoundState
    queue: BatchQueue
    store: ObjectStore
    config: RoundSettings
    decider: PageDecider
    _: KW_ONLY
    retrier: Retrier
    stop: asyncio.Event
    brake: Brake
    emit: Hook
    monotonic: Callable[[], float] = time.monotonic

    async def produce(self) -> None:
        """List every prefix of the round, then tell each of the deleter tasks to end.

        One lister starts; it lists the round's prefixes one after the other. Whenever a
        lister has examined a page while the deleters wait on the listing, one more may
        start (`gcd.rules.listgrowth`: up to `list_concurrency`, and only while more
        listers examine pages faster): it takes the next range not started or, none
        left, the giver narrows its range to the child prefix it is in and the later
        children become ranges for others (`gcd.rules.listsplit`). A lister whose range
        ends takes the next range not started (`_Listers`).
        """
        run, queue = self.run, self.queue
        listers = _Listers(self, run.prefixes)
        try:
            async with asyncio.timeout(self.config.round_deadline_s):
                async with asyncio.TaskGroup() as group:
                    run.counts.prefixes_total = len(run.prefixes)
                    listers.begin(group)
        except TimeoutError:  # listers still at work are cancelled; queued batches go
            run.incomplete = run.deadline_hit = True
            run.counts.errors += 1
            log.error(
                "sweep.round_deadline",
                deadline_s=self.config.round_deadline_s,
                fix="see the sweep.list_* errors before it; --round-deadline",
            )
        growth = listers.growth
        log.info(
            "sweep.listers",
            listers=growth.allowed,
            most=growth.most,
            pinned=growth.pinned,
            pages_per_s=[round(rate, 1) for rate in growth.rates],
            ranges_given=listers.given_away,
        )
        if run.groups is not None:
            await self.decider.planned(run.groups.flush())
        await run.pass_on(queue)
        for _ in range(self.config.concurrency):
            await queue.put(None)

    async def list_prefix(
        self,
        part: ListRange,
        more: Callable[[ListRange, str | None, int], ListRange] | None = None,
        size: int | None = None,
    ) -> None:
        """Page through one range of a listing prefix, one LIST ahead (see the module
        docstring); `more`, told of each page examined (with the last key when the range
        goes on), may start another lister and narrow the range (`gcd.rules.listsplit`).
        `size`: the first page's (default `first_page_size`)."""
        run = self.run
        prefix, full, probing = part.listed, self.config.page_size, self.probing()
        cursor: Cursor | None = Cursor(part.start_after)
        done = part.start_after  # every key up to here is examined
        size = first_page_size(probing, full) if size is None else size
        ahead: _Ahead | None = None
        guard = ListingGuard(self.config.max_pages_per_prefix)
        try:
            while cursor is not None and not self.listing_over():
                if ahead is not None and ahead[:3] != (prefix, cursor, size):
                    await _discard(ahead.task)  # the guess was wrong
                    ahead = None
                task = ahead.task if ahead is not None else self._send(prefix, cursor, size)
                ahead = None
                try:
                    page = await task
                except StorageError as exc:
                    log.error("sweep.list_failed", prefix=prefix, code=exc.code, error=str(exc))
                    await self._unlistable(part, done, exc)
                    return
                guess = self._guess_next(prefix, cursor, page)
                if guess is not None and not self.listing_over():
                    guess_size = next_page_size(size, guess, full, probing=probing)
                    ahead = _Ahead(prefix, guess, guess_size, self._send(prefix, guess, guess_size))
                    await asyncio.sleep(0)  # let it start: examining the page may never yield
                cursor = await self.decider.examine(prefix, cursor, page)
                broken = None if cursor is None else guard.advance(cursor.start_after, cursor.token)
                if broken is not None:
                    log.error("sweep.listing_broken", prefix=prefix, reason=broken)
                    run.counts.errors += 1
                    run.counts.unlistable_prefixes.append(prefix)
                    return
                if cursor is not None:
                    last = page.objects[-1].key if page.objects else done
                    done = cursor.start_after if cursor.token is None else last
                    size = next_page_size(size, cursor, full, probing=probing)
                if more is not None:
                    going_on = cursor is not None and bool(page.objects)
                    kept = more(part, page.objects[-1].key if going_on else None, size)
                    if kept is not part:  # narrowed to a child prefix, after the last key
                        part, prefix = kept, kept.listed
                        if cursor is not None and cursor.token is not None:
                            cursor = Cursor(kept.start_after)  # a token is the wider prefix's
        finally:
            if ahead is not None:
                await _discard(ahead.task)

    async def _unlistable(self, part: ListRange, done: str | None, exc: StorageError) -> None:
        """A range whose listing failed for a whole retry budget (`RoundConfig.backoff`, per
        request; the Azure SDK's own retries are off, so this is the only one).

        After a retryable failure (a name the store cannot list answers 500 for its whole
        prefix) the ten children of the prefix it lists are probed with one one-key LIST
        each, from where it stopped: the listable ones are listed (each with a budget of
        its own), the others narrowed the same way, down to the layout's 3-digit prefix
        directories, so one poison name costs one directory. When no child answers (an
        outage, not a name), or it cannot be narrowed, the prefix is reported by name and
        skipped (one error). A child is listed as a range of its own, never shared.
        """
        prefix = part.listed
        children = _narrower(prefix, self.config.layout, done) if exc.retryable else []
        listable = [await self._answers(child, start) for child, start in children]
        if any(listable):
            log.warning("sweep.prefix_narrowed", prefix=prefix, code=exc.code)
            for (child, start), ok in zip(children, listable, strict=True):
                if self.listing_over():
                    return
                narrowed = ListRange(part.prefix, start.start_after, child)
                if ok:
                    await self.list_prefix(narrowed)
                else:
                    await self._unlistable(narrowed, start.start_after, exc)
            return
        log.error("sweep.prefix_unlistable", prefix=prefix, code=exc.code, error=str(exc))
        self.run.counts.errors += 1
        self.run.counts.unlistable_prefixes.append(prefix)

    def probing(self) -> bool:
        """True when pages start as probes and ranges may be shared: the listing is
        ordered, lists keys (not versions) and may skip. Unordered listings never skip nor
        start after a key; versioned ones page by KeyMarker: both take full pages, unsplit."""
        return self.run.skip_ahead and not self.run.versioned and can_skip(self.config.layout)

    def listing_over(self) -> bool:
        """True once listers must stop: a stop event, the brake, or the delete cap reached."""
        return self.stop.is_set() or self.run.capped or self.brake.engaged is not None

    def _guess_next(self, prefix: str, cursor: Cursor, page: ListPage) -> Cursor | None:
        """What `PageDecider.examine` will return for `page`, guessed from its last key alone."""
        last = page.objects[-1].key if page.objects else None
        found: Skip | None = None
        if last is not None and self.run.skip_ahead and page.next_token is not None:
            found = skip(
                self.config.layout, prefix, self.config.layout.parse(last), self.run.safe_epoch
            )
        return next_cursor(cursor, found, last, page.next_token)

    def _send(self, prefix: str, cursor: Cursor, size: int) -> asyncio.Task[ListPage]:
        return asyncio.create_task(self.list_page(prefix, cursor, size))

    async def list_page(
        self, prefix: str, cursor: Cursor, size: int, *, retry: bool = True
    ) -> ListPage:
        """One LIST, retried by the retry loop; raises the StorageError that ended it."""

        lister = self.store.list_page
        if self.run.versioned:
            assert isinstance(self.store, VersionedStore)
            lister = self.store.list_versions_page

        async def attempt() -> ListPage:
            # Counted when sent (the round's counter and the metric), so a LIST sent
            # ahead and then discarded unread counts too: these count what S3 bills.
            self.run.counts.list_requests += 1
            self.emit(LIST_SENT)
            try:
                async with deadline(self.config.request_deadline_s, f"LIST {prefix}"):
                    return await lister(
                        prefix,
                        start_after=cursor.start_after,
                        continuation_token=cursor.token,
                        max_keys=size,
                    )
            except StorageError as exc:
                self.emit(ListFailed(exc.code))
                raise

        def on_retry(exc: StorageError, attempt: int, _delay: float) -> None:
            log.info("sweep.list_retry", prefix=prefix, code=exc.code, attempt=attempt)

        if not retry:
            return await attempt()
        return await self.retrier.call(attempt, on_retry=on_retry, stopped=self.stop.is_set)

    async def _answers(self, prefix: str, start: Cursor) -> bool:
        """Whether one one-key LIST of `prefix` (no retry) succeeds."""
        try:
            await self.list_page(prefix, start, 1, retry=False)
        except StorageError:
            return False
        return True

    async def exists(self, key: str) -> bool:
        """Whether an object `key` exists: one one-key LIST (`gcd.sweep.nesting`)."""
        page = await self.list_page(key, Cursor(), 1)
        return bool(page.objects) and page.objects[0].key == key

    async def stored(self, key: str) -> bool:
        """Whether an object `key` exists, without a listing (unordered stores refuse a
        prefix that does not end in '/'): one GET of at most a claim's size. A store that
        cannot read an object answers True: the key is kept."""
        get_object = getattr(self.store, "get_object", None)
        if get_object is None:
            return True
        return await get_object(key, max_bytes=CLAIM_MAX_BYTES) is not None


class _Listers:
    """The listers of one round and the ranges they share (`RoundLister.produce`)."""

    def __init__(self, owner: RoundLister, prefixes: Sequence[str]) -> None:
        self.owner = owner
        self.growth = ListerGrowth(owner.config.list_concurrency)
        self.pending: deque[tuple[ListRange, int | None]] = deque()
        """Ranges not started, each with its first page's size (None: a probe)."""
        self.ranges: dict[str, int] = {}
        """Prefix -> its ranges not listed to their end (counted from when each is made)."""
        self.running = 0
        """Listers at work."""
        self.given_away = 0
        """Ranges split off a running lister's (each costs a LIST or more)."""
        self._group: asyncio.TaskGroup | None = None
        for prefix in prefixes:
            self.pending.append((ListRange(prefix), None))
            self.ranges[prefix] = self.ranges.get(prefix, 0) + 1

    def begin(self, group: asyncio.TaskGroup) -> None:
        """Start the first lister in `group` (none when there is nothing to list)."""
        self._group = group
        if self.pending:
            self._start()

    def _start(self) -> None:
        assert self._group is not None
        self.running += 1
        self._group.create_task(self._lister(*self.pending.popleft()))

    async def _lister(self, part: ListRange, size: int | None) -> None:
        try:
            await self._one(part, size)
            while self.pending:
                await self._one(*self.pending.popleft())
        finally:
            self.running -= 1

    async def _one(self, part: ListRange, size: int | None) -> None:
        owner = self.owner
        run = owner.run
        try:
            await owner.list_prefix(part, self.more, size)
            if run.groups is not None:
                await owner.decider.planned(run.groups.flush(part.prefix))
            # a range ended: its garbage goes now, not when all listing has
            await run.pass_on(owner.queue)
        finally:
            self.ranges[part.prefix] -= 1
            if not self.ranges[part.prefix]:
                run.counts.prefixes_done += 1

    def more(self, part: ListRange, last_key: str | None, size: int) -> ListRange:
        """After each page: start one more lister if the deleters wait on the listing
        and one more is allowed (or may be grown); it takes the next range not started,
        or (none left) `part` is narrowed after `last_key` and the ranges after it go to
        other listers, from pages of `size` keys (the giver's). Return the range the
        caller goes on with."""
        owner = self.owner
        self.growth.page(owner.monotonic())
        if not owner.run.starved(owner.queue) or owner.listing_over():
            return part
        narrowed = None
        if not self.pending:
            if last_key is None or not owner.probing():
                return part
            narrowed = narrow(owner.config.layout, part, last_key)
            if narrowed is None:
                return part
        if self.running >= self.growth.allowed and not self.growth.grow(starved=True):
            return part
        if narrowed is not None:
            part, given = narrowed
            self.pending.extend((piece, size) for piece in given)
            self.ranges[part.prefix] += len(given)
            self.given_away += len(given)
        self._start()
        return part


def _narrower(prefix: str, layout: KeyLayout, done: str | None) -> list[tuple[str, Cursor]]:
    """The children of a listing prefix that keeps failing, each with where its listing
    starts given that every key up to `done` is examined; [] when it cannot be narrowed
    (no 000-999 prefix in the layout, or already a whole prefix directory)."""
    depth = len(prefix) - len(layout.listing_root)
    if not layout.has_prefix or not prefix.startswith(layout.listing_root) or depth >= 3:
        return []
    children: list[tuple[str, Cursor]] = []
    for child in (prefix + digit for digit in "0123456789"):
        if done is None or done[: len(child)] < child:
            children.append((child, Cursor()))
        elif done.startswith(child):
            children.append((child, Cursor(start_after=done)))
    return children


async def _discard(task: asyncio.Task[ListPage]) -> None:
    """Cancel a LIST sent ahead that is not wanted and wait for it to end, unread.

    Nothing of it is examined or counted but the request itself (when it was sent); a
    failure of it is no error of the round.
    """
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved
