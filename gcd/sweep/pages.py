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
from gcd.rules.decision import Verdict, decide
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
        """
        run, layout, config = self.run, self.config.layout, self.config
        now = self.clock()
        found: Skip | None = None  # the last skip a key of this page called for
        tally = dict.fromkeys(Verdict, 0)
        claim = claim_key(layout.root)  # the namespace's binding, never an L0 object
        assert run.nested is not None
        run.nested.scan(prefix, page)  # claims below the root block their subtree
        kept = 0  # deletable, but under a nested root
        held = 0  # deletable by M, not by the delayed M of the undo window
        grouped = 0  # versions of deletable keys, planned per key (the undo window)
        for obj in page.objects:
            skip_to = found.start_after if found is not None else None
            if (skip_to is not None and obj.key <= skip_to) or obj.key == claim:
                continue
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
                kept += 1
            elif verdict is Verdict.DELETE and parsed is not None and run.groups is not None:
                tally[verdict] -= 1  # its key's plan selects what is eligible
                grouped += 1
                await self._grouped(prefix, obj, parsed.epoch, young=False)
            elif (
                verdict is Verdict.DELETE
                and parsed is not None
                and run.ceiling is not None
                and parsed.epoch > run.ceiling
            ):
                tally[verdict] -= 1
                held += 1
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
                    break  # the per-round delete cap is reached
            elif verdict is Verdict.NOT_ELIGIBLE and run.skip_ahead:
                found = skip(layout, prefix, parsed, run.safe_epoch) or found
                if found is not None and found.done:
                    break  # the rest of this listing prefix is not eligible
            elif verdict is Verdict.TOO_YOUNG:
                if run.groups is not None and parsed is not None:
                    await self._grouped(prefix, obj, parsed.epoch, young=True)
                ready = obj.last_modified_s + config.grace_s
                if run.young_ready_at_s is None or ready < run.young_ready_at_s:
                    run.young_ready_at_s = ready
            elif verdict in {Verdict.UNPARSABLE, Verdict.OUTSIDE_ROOT}:
                self._note_unparsable(obj)
        self._count(tally, held=held + grouped, kept=kept)
        last = page.objects[-1].key if page.objects else None
        return next_cursor(cursor, found, last, page.next_token)

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
