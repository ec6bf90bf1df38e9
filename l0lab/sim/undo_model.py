"""The undo window and `gcd restore` as moves of the exhaustive checker (`--model undo`).

The real sweeper (`run_round`, an `UndoKeeper` whose ledger is loaded from the journal
at each process start), the real journal (`JournalWriter` in a temporary directory), the
real `WatermarkStore` on `MemoryKV` and the real restore (`deletions_in`, `select`,
`restore`) on a versioned in-memory bucket, as in the random undo simulation
(`l0lab.sim.undo`); here every choice is a move and the search takes every order.

====================  ===============================================================
``upload P``          a writer of P uploads a needed object at the cluster epoch
``tick``              the cluster epoch advances (up to `MAX_EPOCH`)
``drop K``            K is no longer needed (its entry was lifted)
``rewrite K``         a writer writes hidden key K again (a newer data version)
``publish``           every partition publishes its true M(p) (a mistaken one keeps
                      its wrong M(p) until the repair)
``sweep``             one sweeper round
``restart``           the sweeper process restarts
``window``            time moves past the undo window (never while a mistake waits
                      for its repair: the runbook's premise)
``mistake P``         fault: P publishes M(p) = cluster epoch - 1 while it still needs
                      older objects
``forge K``           fault: a before/after pair naming K's current data version as
                      l0gc's delete marker is added to the journal (issue 51 finding 2)
``restore``           the runbook after a mistake: `gcd pause`, then `gcd restore
                      --since` the mistake, then the sweeper restarts
``repair``            `watermark partition repair` to the true M(p), `gcd resume`,
                      the sweeper restarts
====================  ===============================================================

Checks after every move (`l0lab.sim.checks`): LOST_BYTES, no version of a needed object
holds its newest bytes; DELETED_WHILE_PAUSED; HIDDEN_AFTER_RESTORE, a needed key that
was hidden at the restore is not current with its bytes from then on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from gcd.journal.records import JournalWriter, read_journal
from gcd.observe.events import BatchAttempt, BatchOutcome
from gcd.observe.metrics import SweeperMetrics
from gcd.rules.admission import SafetyGate
from gcd.rules.layout import KeyLayout
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from gcd.undo.restore import Selection, deletions_in, select
from gcd.undo.window import UndoKeeper
from l0gc.contract.kv import Put
from l0gc.contract.namespace import Publication
from l0gc.contract.record import PartitionRecord
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.sim.checks import Violation, ViolationKind
from l0lab.sim.runner import quiet_logs
from l0lab.sim.smallmodel import ModelRun
from l0lab.sim.variants import Variant
from l0lab.testing.versioned import VersionedMemoryStore

__all__ = ["UndoModel"]

NAMESPACE = "/l0gc/model-undo"
WINDOW_S = 600.0
MAX_EPOCH = 3
MAX_OBJECTS = 2
MAX_WINDOWS = 1
_START = 1_800_000_000.0


@functools.cache
def _metrics() -> SweeperMetrics:
    """One registry for every process of every path (building one costs ~2 ms)."""
    return SweeperMetrics()


@dataclass(frozen=True, slots=True)
class UndoModel:
    """The model (see the module docstring); `partitions` 1 or 2."""

    partitions: int = 1
    depth: int = 7
    name: str = "undo"

    def run(self, variant: Variant, moves: Sequence[str]) -> ModelRun:
        """Run the real code along `moves`."""
        with tempfile.TemporaryDirectory(prefix="l0gc-model-undo-") as directory:
            world = _World(variant, Path(directory), self.partitions)
            run = ModelRun(tuple(moves), world.violations, world.trace)
            with quiet_logs():
                asyncio.run(world.play(moves, run))
            world.close()
        return run


@dataclass
class _Object:
    partition: str
    epoch: int
    body: bytes
    needed: bool = True
    rewritten: bool = False


class _World:
    def __init__(self, variant: Variant, directory: Path, partitions: int) -> None:
        self.variant = variant
        self.directory = directory
        self.now = _START
        self.names = [f"t/{index}" for index in range(partitions)]
        self.kv = MemoryKV(now=self.clock)
        self.store = WatermarkStore(self.kv, NAMESPACE, wall_clock=self.clock)
        self.bucket = VersionedMemoryStore(self.clock)
        self.layout = KeyLayout.default()
        self.config = RoundConfig(
            layout=self.layout, grace_s=0.0, undo_window_s=WINDOW_S, batch_size=50, page_size=100
        )
        self.objects: dict[str, _Object] = {}
        self.owned: dict[str, int] = {}
        self.cluster_epoch = 1
        self.mistake: tuple[str, float] | None = None
        self.restored = self.repaired = self.forged = False
        self.hidden_at_restore: set[str] = set()
        self.windows = 0
        self.sweepers = 0
        self.writer: JournalWriter | None = None
        self.sweeper: Sweeper | None = None
        self.gate = SafetyGate()
        self.violations: list[Violation] = []
        self.trace: list[str] = []
        self.step = 0

    def clock(self) -> float:
        return self.now

    def fail(self, kind: ViolationKind, detail: str) -> None:
        self.violations.append(Violation(kind, self.step, detail))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    # -- the path ---------------------------------------------------------------------

    async def play(self, moves: Sequence[str], run: ModelRun) -> None:
        self.cluster_epoch = await self.store.init_cluster_epoch(1)
        for name in self.names:
            await self.store.register_partition(name)
            self.owned[name] = (await self.store.acquire_ownership(name, "w")).owner_epoch
        self.restart()
        for move in moves:
            self.step += 1
            self.now += 1.0
            self.trace.append(f"> {move}")
            kind, *args = move.split()
            await getattr(self, "_" + kind.replace("-", "_"))(*args)
            self.check()
            if self.violations:
                return
        run.state = await self.snapshot()
        run.enabled = list(self.enabled())

    def enabled(self) -> Iterator[str]:
        if len(self.objects) < MAX_OBJECTS:
            yield from (f"upload {name}" for name in self.names)
        if self.cluster_epoch < MAX_EPOCH:
            yield "tick"
        needed = [key for key, obj in self.objects.items() if obj.needed]
        yield from (f"drop {self._short(key)}" for key in needed)
        if not any(obj.rewritten for obj in self.objects.values()):
            yield from (
                f"rewrite {self._short(key)}" for key in needed if self.bucket.current(key) is None
            )
        yield "publish"
        yield "sweep"
        yield "restart"
        if self.windows < MAX_WINDOWS and (self.mistake is None or self.repaired):
            yield "window"
        if self.mistake is None:
            yield from (
                f"mistake {name}"
                for name in self.names
                if self.cluster_epoch - 1 > self.true_watermark(name)
            )
        elif not self.restored:
            yield "restore"
        elif not self.repaired:
            yield "repair"
        if not self.forged:
            yield from (
                f"forge {self._short(key)}"
                for key in needed
                if self.bucket.current(key) is not None
            )

    def _short(self, key: str) -> str:
        return key.rsplit("/", 1)[-1]

    def _key(self, short: str) -> str:
        return next(key for key in self.objects if self._short(key) == short)

    # -- the moves --------------------------------------------------------------------

    async def _upload(self, name: str) -> None:
        key = self.layout.format(0, self.cluster_epoch, f"o{len(self.objects)}")
        body = f"{key}#1".encode()
        self.bucket.put(key, body)
        self.objects[key] = _Object(name, self.cluster_epoch, body)

    async def _tick(self) -> None:
        self.cluster_epoch = await self.store.advance_cluster_epoch()

    async def _drop(self, short: str) -> None:
        self.objects[self._key(short)].needed = False

    async def _rewrite(self, short: str) -> None:
        key = self._key(short)
        obj = self.objects[key]
        obj.body, obj.rewritten = f"{key}#2".encode(), True
        self.bucket.put(key, obj.body)

    async def _publish(self) -> None:
        for name in self.names:
            if self.mistake is not None and self.mistake[0] == name and not self.repaired:
                continue
            await self.publish(name, self.true_watermark(name))

    async def _sweep(self) -> None:
        assert self.sweeper is not None
        before = self.bucket.delete_requests
        paused = await self.store.get_paused() is not None
        result = await run_round(self.sweeper, self.gate, self.store)
        if paused and self.bucket.delete_requests != before:
            self.fail(ViolationKind.DELETED_WHILE_PAUSED, "a round sent deletes while paused")
        summary = result.summary
        self.trace.append(
            f"round M={summary.safe_epoch} hidden={summary.markers_written} "
            f"reclaimed={summary.versions_reclaimed}"
        )

    async def _restart(self) -> None:
        self.restart()

    async def _window(self) -> None:
        self.now += WINDOW_S + 1.0
        self.windows += 1

    async def _mistake(self, name: str) -> None:
        await self.publish(name, self.cluster_epoch - 1)
        self.mistake = (name, self.now)
        self.trace.append(f"{name} publishes M(p)={self.cluster_epoch - 1}")

    async def _forge(self, short: str) -> None:
        key = self._key(short)
        data = self.bucket.versions[key][-1].version_id
        forger = JournalWriter(
            self.directory,
            "forger",
            namespace=NAMESPACE,
            bucket="sim",
            root=self.layout.root,
            fsync=False,
            clock=self.clock,
            metrics=_metrics(),
        )
        attempt = BatchAttempt(None, (key,), (self.objects[key].epoch,), 1, 1, 1, hides=((data,),))
        forger.before(attempt)
        forger.after(BatchOutcome(attempt, deleted=(key,), markers=((key, data),)))
        forger.close()
        self.forged = True
        self.trace.append(f"journal names data version {data} of {short} as l0gc's marker")

    async def _restore(self) -> None:
        assert self.mistake is not None
        if self.variant.paused_restore:
            await self.store.set_paused("wrong M(p)")
        self.hidden_at_restore = {
            key
            for key, obj in self.objects.items()
            if obj.needed and self.bucket.current(key) is None
        }
        self.close()
        chosen = select(
            deletions_in(read_journal([self.directory])), Selection(since=self.mistake[1])
        )
        results = await self.variant.restore(self.bucket, chosen)
        self.trace.append(
            "restore: " + ", ".join(f"{self._short(r.key)} {r.outcome.value}" for r in results)
        )
        self.restored = True
        self.restart()

    async def _repair(self) -> None:
        assert self.mistake is not None
        name = self.mistake[0]
        key = self.store.partition_key(name)
        raw = await self.kv.get(key)
        assert raw is not None
        record = PartitionRecord.decode(raw.value, partition=name)
        repaired = dataclasses.replace(record, watermark=self.true_watermark(name))
        await self.kv.txn([], [Put(key, repaired.encode())])
        await self.store.clear_paused()
        self.repaired = True
        self.restart()

    # -- helpers ----------------------------------------------------------------------

    def restart(self) -> None:
        """A fresh sweeper process: its own journal segment, its ledger from the journal."""
        self.close()
        self.sweepers += 1
        keeper = UndoKeeper(WINDOW_S, clock=self.clock)
        keeper.ledger.load(read_journal([self.directory]))
        self.writer = JournalWriter(
            self.directory,
            f"s{self.sweepers}",
            namespace=NAMESPACE,
            bucket="sim",
            root=self.layout.root,
            fsync=False,
            clock=self.clock,
            metrics=_metrics(),
        )
        self.sweeper = Sweeper(
            self.bucket,
            self.config,
            clock=self.clock,
            monotonic=self.clock,
            undo=keeper,
            sinks=[self.writer],
            metrics=_metrics(),
            sweeper_id=f"s{self.sweepers}",
        )
        self.gate = SafetyGate()

    def true_watermark(self, name: str) -> int:
        epochs = [
            obj.epoch for obj in self.objects.values() if obj.partition == name and obj.needed
        ]
        return min(epochs) - 1 if epochs else self.cluster_epoch - 1

    async def publish(self, name: str, watermark: int) -> None:
        record = await self.store.get_partition(name)
        assert record is not None
        if watermark > record.watermark:
            await self.store.publish_one(Publication(name, "w", self.owned[name], watermark))

    def check(self) -> None:
        for key, obj in self.objects.items():
            if obj.needed and obj.body not in {v.body for v in self.bucket.versions.get(key, [])}:
                self.fail(ViolationKind.LOST_BYTES, f"needed object {key} lost its bytes")
        if self.restored and not self.repaired:
            for key in sorted(self.hidden_at_restore):
                obj = self.objects[key]
                if obj.needed and self.bucket.current(key) != obj.body:
                    self.fail(
                        ViolationKind.HIDDEN_AFTER_RESTORE,
                        f"{key}, restored, is not current before the repair",
                    )

    async def snapshot(self) -> bytes:
        """Everything a later move can read: hashed."""
        records = [await self.store.get_partition(name) for name in self.names]
        journal = [
            (d.key, d.marker, d.hides, d.at >= (self.mistake or ("", 0.0))[1])
            for d in deletions_in(read_journal([self.directory]))
        ]
        journal.sort(key=repr)
        state = (
            self.now - _START,
            self.cluster_epoch,
            await self.store.get_paused() is not None,
            sorted((k, dataclasses.astuple(o)) for k, o in self.objects.items()),
            sorted(
                (k, [(v.version_id, v.body) for v in vs]) for k, vs in self.bucket.versions.items()
            ),
            [None if r is None else r.watermark for r in records],
            journal,
            self.mistake,
            self.restored,
            self.repaired,
            self.forged,
            self.windows,
            sorted(self.hidden_at_restore),
            self.gate.highest,
        )
        return hashlib.sha256(repr(state).encode()).digest()
