"""Deciding one listed page: which objects a round deletes, and where its listing goes on.

Design notes: docs/internals/sweep.md, `gcd.sweep.pages`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Final

import structlog

from gcd.observe.report import PlanWriter
from gcd.observe.telemetry import PageExamined
from gcd.rules.candidate import Candidate
from gcd.rules.cursor import Cursor, Skip, next_cursor, skip
from gcd.rules.decision import Verdict, decide, deletable_epochs
from gcd.storage.objectstore import ListPage, ObjectInfo
from gcd.sweep.roundstate import BatchQueue, RoundSettings, RoundState
from l0gc.contract.binding import claim_key
from l0gc.events import Hook

__all__ = ["LOGGED_UNPARSABLE", "PageDecider"]

log = structlog.get_logger("gcd.sweeper")

LOGGED_UNPARSABLE: Final = 10
"""Unparsable keys logged by name per round; the rest are only counted."""
_SKIP_VERDICTS: Final = (
    Verdict.NOT_ELIGIBLE,
    Verdict.TOO_YOUNG,
    Verdict.UNPARSABLE,
    Verdict.OUTSIDE_ROOT,
    Verdict.REFERENCED,
)


@dataclass(slots=True)
class _Page:
    """What the decision of one page has counted so far, and where it may skip to."""

    tally: dict[Verdict, int]
    claim: str
    """The namespace's binding: under the root, never an L0 object, never examined."""
    found: Skip | None = None
    """The last skip a key of this page called for."""
    kept: int = 0
    """Deletable, but under a nested root."""
    held: int = 0
    """Deletable by M, not by the delayed M of the undo window."""
    grouped: int = 0
    """Versions of deletable keys, planned per key (the undo window)."""


@dataclass(eq=False)
class PageDecider:
    """Decides the pages of one round (`run`), queueing batches on `queue`."""

    run: RoundState
    queue: BatchQueue
    config: RoundSettings
    _: KW_ONLY
    clock: Callable[[], float]
    plan: PlanWriter | None
    emit: Hook

    async def examine(self, prefix: str, cursor: Cursor, page: ListPage) -> Cursor | None:
        """Decide every object of a page, queue the deletable ones; where the listing goes on.

        None: this listing prefix is done (last page, or the rest of it is above M).
        Runs of keys the rule deletes outright are taken a run at a time (`_plain`,
        `_select_run`); every other key is decided alone (`_one`), as is the rest of a
        page once a key called for a skip.
        """
        now = self.clock()
        assert self.run.nested is not None
        self.run.nested.scan(prefix, page)  # claims below the root block their subtree
        objects = page.objects
        state = _Page(dict.fromkeys(Verdict, 0), claim_key(self.config.layout.root))
        plain = self._plain(objects, now, state.claim)
        at, end = 0, len(objects)
        while at < end:
            if plain is not None and state.found is None and plain[at] >= 0:
                try:
                    stop = plain.index(-1, at)
                except ValueError:
                    stop = end
                if await self._select_run(objects[at:stop], plain[at:stop], state):
                    break
                at = stop
            elif await self._one(prefix, objects[at], page, now, state):
                break
            else:
                at += 1
        self._count(state.tally, held=state.held + state.grouped, kept=state.kept)
        last = objects[-1].key if objects else None
        return next_cursor(cursor, state.found, last, page.next_token)

    def _plain(self, objects: Sequence[ObjectInfo], now: float, claim: str) -> list[int] | None:
        """Each object's epoch when it is deleted outright (the rule says DELETE, below the
        undo window's delayed M, not the namespace's claim, no nested root may hold it),
        else -1; None when no key of the page can be (the undo window's key groups, or a
        nested root this page may hide): the page is then decided key by key."""
        run, config = self.run, self.config
        assert run.nested is not None
        keys = [obj.key for obj in objects]
        if run.groups is not None or run.nested.page_may_block(keys):
            return None
        epochs = deletable_epochs(
            keys,
            [obj.last_modified_s for obj in objects],
            config.layout,
            run.safe_epoch,
            now,
            config.grace_s,
            referenced=run.basis.references,
        )
        ceiling = run.ceiling
        if ceiling is not None:  # held by the delayed M: counted as pending by `_one`
            epochs = [epoch if epoch <= ceiling else -1 for epoch in epochs]
        if claim in keys:
            epochs = [-1 if k == claim else e for k, e in zip(keys, epochs, strict=True)]
        return epochs

    async def _select_run(
        self, objects: Sequence[ObjectInfo], epochs: Sequence[int], state: _Page
    ) -> bool:
        """Select a run of objects the rule deletes outright, a batch's room at a time, as
        `select` would one by one; True when the round's delete cap ends the page."""
        run, config = self.run, self.config
        cap = config.max_deletes
        at, end = 0, len(objects)
        while at < end:
            if run.capped:
                return True  # another lister hit the cap: the rest is not examined
            take = min(end - at, max(1, config.batch_size - len(run.batch)))
            if cap is not None:
                take = min(take, max(1, cap - run.counts.eligible))
            chunk, chunk_epochs = objects[at : at + take], epochs[at : at + take]
            at += take
            run.counts.eligible += take
            state.tally[Verdict.DELETE] += take
            if cap is not None and run.counts.eligible >= cap:
                log.info("sweep.delete_cap_reached", max_deletes=cap)
                run.capped = True
            if self.plan is not None:
                for obj, epoch in zip(chunk, chunk_epochs, strict=True):
                    self.plan.write(obj.key, epoch, obj.size, obj.last_modified_s)
            if not config.dry_run:
                run.batch.extend(
                    Candidate(
                        obj.key,
                        obj.size,
                        epoch,
                        obj.version_id,
                        obj.delete_marker,
                        generation=obj.generation,
                    )
                    for obj, epoch in zip(chunk, chunk_epochs, strict=True)
                )
            if len(run.batch) >= config.batch_size:
                await run.pass_on(self.queue)
            if run.full():
                return True
        return False

    async def _one(
        self, prefix: str, obj: ObjectInfo, page: ListPage, now: float, state: _Page
    ) -> bool:
        """Decide one object of the page; True when the rest of the page is not examined."""
        run, layout, config = self.run, self.config.layout, self.config
        assert run.nested is not None
        found = state.found
        skip_to = found.start_after if found is not None else None
        if (skip_to is not None and obj.key <= skip_to) or obj.key == state.claim:
            return False
        tally = state.tally
        verdict, parsed = decide(
            obj.key,
            obj.last_modified_s,
            layout,
            run.safe_epoch,
            now,
            config.grace_s,
            referenced=run.basis.references,
        )
        tally[verdict] += 1
        if (
            verdict is Verdict.DELETE
            and run.nested.may_block(obj.key)
            and await run.nested.blocks(obj.key, page)
        ):
            tally[verdict] -= 1
            state.kept += 1
        elif verdict is Verdict.DELETE and parsed is not None and run.groups is not None:
            tally[verdict] -= 1  # its key's plan selects what is eligible
            state.grouped += 1
            await self._grouped(prefix, obj, parsed.epoch, young=False)
        elif (
            verdict is Verdict.DELETE
            and parsed is not None
            and run.ceiling is not None
            and parsed.epoch > run.ceiling
        ):
            tally[verdict] -= 1
            state.held += 1
            run.counts.pending_keys += 1
            run.counts.pending_bytes += obj.size
        elif verdict is Verdict.DELETE and parsed is not None:
            candidate = Candidate(
                obj.key,
                obj.size,
                parsed.epoch,
                obj.version_id,
                obj.delete_marker,
                generation=obj.generation,
            )
            if not self.select(candidate, obj):
                tally[verdict] -= 1  # not examined: another lister hit the cap
            if len(run.batch) >= config.batch_size:  # no coroutine per key otherwise
                await run.pass_on(self.queue)
            if run.full():
                return True  # the per-round delete cap is reached
        elif verdict is Verdict.NOT_ELIGIBLE and run.skip_ahead:
            state.found = skip(layout, prefix, parsed, run.safe_epoch) or found
            if state.found is not None and state.found.done:
                return True  # the rest of this listing prefix is not eligible
        elif verdict is Verdict.TOO_YOUNG:
            if run.groups is not None and parsed is not None:
                await self._grouped(prefix, obj, parsed.epoch, young=True)
            ready = obj.last_modified_s + config.grace_s
            if run.young_ready_at_s is None or ready < run.young_ready_at_s:
                run.young_ready_at_s = ready
        elif verdict in {Verdict.UNPARSABLE, Verdict.OUTSIDE_ROOT}:
            self._note_unparsable(obj)
        return False

    async def _grouped(self, prefix: str, obj: ObjectInfo, epoch: int, *, young: bool) -> None:
        """One version of an eligible key, gathered with the key's other versions; the key
        before it, now complete, is planned (`gcd.undo.window`)."""
        assert self.run.groups is not None
        done = self.run.groups.feed(prefix, obj, epoch, young)
        if done is not None:
            await self.planned([done])

    async def planned(self, groups: Sequence[object]) -> None:
        """Plan complete key groups; select (and batch) what their plans delete."""
        run = self.run
        assert run.groups is not None
        now = self.clock()
        for group in groups:
            for candidate, obj in run.groups.plans(group, now, run.counts):  # type: ignore[arg-type]
                if not self.select(candidate, obj):
                    return
                if len(run.batch) >= self.config.batch_size:
                    await run.pass_on(self.queue)

    def _note_unparsable(self, obj: ObjectInfo) -> None:
        self.run.unparsable_logged += 1
        if self.run.unparsable_logged <= LOGGED_UNPARSABLE:
            log.warning("sweep.unparsable_key", key=obj.key, layout=self.config.layout.pattern)

    def _count(self, tally: dict[Verdict, int], *, held: int, kept: int) -> None:
        """Count a decided page: every examined object (`held`: kept by the undo window's
        delayed M, pending, or planned with its key's other versions, which selects the
        eligible ones; `kept`: under a nested root), and why the others stayed."""
        counts = self.run.counts
        listed = sum(tally.values()) + held + kept
        counts.listed += listed
        counts.skipped_not_eligible += tally[Verdict.NOT_ELIGIBLE]
        counts.skipped_young += tally[Verdict.TOO_YOUNG]
        counts.unparsable += tally[Verdict.UNPARSABLE] + tally[Verdict.OUTSIDE_ROOT]
        counts.skipped_nested += kept
        skipped = [(verdict.value, tally[verdict]) for verdict in _SKIP_VERDICTS if tally[verdict]]
        if kept:
            skipped.append(("nested_root", kept))
        self.emit(PageExamined(listed, tuple(skipped)))

    def select(self, item: Candidate, obj: ObjectInfo) -> bool:
        """Take a deletable object into the round's batch; False when the round's delete
        cap was already reached. (Not a coroutine: it runs for every deletable key.)"""
        run = self.run
        if run.capped:
            return False
        run.counts.eligible += 1
        cap = self.config.max_deletes
        if cap is not None and run.counts.eligible >= cap:
            if not run.capped:
                log.info("sweep.delete_cap_reached", max_deletes=cap)
            run.capped = True
        if self.plan is not None:
            self.plan.write(obj.key, item.epoch, obj.size, obj.last_modified_s)
        if not self.config.dry_run:
            run.batch.append(item)
        return True
