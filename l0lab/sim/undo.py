"""The undo window in the simulation: a wrong M(p), a restore mid-run, nothing lost.

What runs
---------
The real sweeper (`run_round`, a `Sweeper` with an `UndoKeeper` whose marker ledger is
loaded from the journal at each process start) on a versioned in-memory bucket
(`l0lab.testing.versioned`), the real `WatermarkStore` on `MemoryKV` (M(p), M, pause), the
real deletion journal (`JournalWriter`, in a temporary directory) and the real restore
(`gcd.undo.restore`: `deletions_in`, `select`, `restore`). Time is a virtual clock
moved by each step; one `random.Random(seed)` decides everything.

The story of a seed
-------------------
Three partitions upload objects at the cluster epoch, drop some of them (garbage), and
publish their true M(p) (the epoch below their oldest needed object); the epoch
advances; sweeper rounds run; a writer sometimes deletes a garbage object itself (a
delete marker l0gc did not write); the sweeper process restarts now and then. At a
random step one partition publishes a wrong M(p) (the cluster epoch - 1) while it still
needs older objects, and sweeper rounds hide them. Within the window, the operator
follows the runbook: pause, restore the deletions made while that partition pinned M
since the bug, repair M(p) to its true value, resume, restart the sweepers (a running
sweeper refuses an M below one it used: `gcd.rules.admission`). A quiescent tail then
drops every object and moves time past the window.

Checks
------
After every step: no needed object has lost its bytes (its newest data version, the
one it was written with, still exists); after the restore every needed object is
current with its own bytes, and stays so (also through the sweeper rounds run while
paused, which must send no delete at all). At the end: every garbage key is gone with
every version and every l0gc marker, except keys a writer deleted itself, which are
never touched. `broken_restore=True` skips the pause (what `gcd restore` refuses): the
checks must catch the restored objects hidden again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gcd.journal.records import JournalWriter, read_journal
from gcd.rules.admission import SafetyGate
from gcd.rules.layout import KeyLayout
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from gcd.undo.restore import Selection, deletions_in, restore, select
from gcd.undo.window import UndoKeeper
from l0gc.contract.kv import Put
from l0gc.contract.namespace import Publication
from l0gc.contract.record import PartitionRecord
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore
from l0lab.sim.runner import quiet_logs
from l0lab.testing.versioned import VersionedMemoryStore

__all__ = ["UndoSimResult", "run_undo_seed"]

NAMESPACE = "/l0gc/sim-undo"
PARTITIONS = ("t/0", "t/1", "t/2")


@dataclass
class UndoSimResult:
    """One seed's outcome: what went wrong (empty: nothing), and what happened."""

    seed: int
    violations: list[str] = field(default_factory=list)
    hidden_by_bug: int = 0
    restored: int = 0
    reclaimed: int = 0
    events: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.violations


class _Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class _Object:
    partition: str
    epoch: int
    body: bytes
    needed: bool = True
    self_deleted: bool = False


class _Run:
    """One seed's world (see the module docstring)."""

    def __init__(self, seed: int, directory: Path, *, broken_restore: bool) -> None:
        self.rng = random.Random(seed)
        self.clock = _Clock()
        self.result = UndoSimResult(seed)
        self.broken_restore = broken_restore
        self.kv = MemoryKV(now=self.clock)
        self.store = WatermarkStore(self.kv, NAMESPACE, wall_clock=self.clock)
        self.bucket = VersionedMemoryStore(self.clock)
        self.layout = KeyLayout.default()
        self.objects: dict[str, _Object] = {}
        self.directory = directory
        self.window_s = float(self.rng.choice([600, 1800, 3600]))
        self.config = RoundConfig(
            layout=self.layout,
            grace_s=0.0,
            undo_window_s=self.window_s,
            batch_size=self.rng.choice([2, 5, 50]),
            page_size=self.rng.choice([3, 10, 100]),
        )
        self.owned: dict[str, int] = {}
        self.cluster_epoch = 0
        self.bug: tuple[str, float] | None = None
        self.restored_keys: set[str] = set()
        self.repaired = False
        self.sweepers = 0
        self.writer: JournalWriter | None = None
        self.sweeper: Sweeper | None = None
        self.gate = SafetyGate()

    def fail(self, text: str) -> None:
        self.result.violations.append(f"t={self.clock.now - 1_800_000_000.0:.0f}s {text}")

    # -- the actors -----------------------------------------------------------------

    async def setup(self) -> None:
        self.cluster_epoch = await self.store.init_cluster_epoch(self.rng.randint(2, 5))
        for name in PARTITIONS:
            await self.store.register_partition(name)
            self.owned[name] = (await self.store.acquire_ownership(name, "w")).owner_epoch
        self.restart()

    def restart(self) -> None:
        """A fresh sweeper process: its journal segment, ledger loaded from the journal."""
        if self.writer is not None:
            self.writer.close()
        self.sweepers += 1
        read = read_journal([self.directory])
        keeper = UndoKeeper(self.window_s, clock=self.clock)
        keeper.ledger.load(read)
        self.writer = JournalWriter(
            self.directory,
            f"s{self.sweepers}",
            namespace=NAMESPACE,
            bucket="sim",
            root=self.layout.root,
            fsync=False,
            clock=self.clock,
        )
        self.sweeper = Sweeper(
            self.bucket,
            self.config,
            clock=self.clock,
            monotonic=self.clock,
            undo=keeper,
            sinks=[self.writer],
            sweeper_id=f"s{self.sweepers}",
        )
        self.gate = SafetyGate()

    def upload(self) -> None:
        name = self.rng.choice(PARTITIONS)
        for _ in range(self.rng.randint(1, 3)):
            index = len(self.objects)
            key = self.layout.format(self.rng.randrange(4), self.cluster_epoch, f"o{index}")
            body = f"{key}:{self.rng.random()}".encode()
            self.bucket.put(key, body)
            self.objects[key] = _Object(name, self.cluster_epoch, body)

    def drop(self) -> None:
        needed = [key for key, obj in self.objects.items() if obj.needed]
        for key in self.rng.sample(needed, min(len(needed), self.rng.randint(0, 3))):
            self.objects[key].needed = False
            if self.rng.random() < 0.15 and self.bucket.current(key) is not None:
                self.bucket.delete_marker(key)  # the writer deletes it itself
                self.objects[key].self_deleted = True

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

    async def publish_all(self) -> None:
        for name in PARTITIONS:
            if self.bug is not None and self.bug[0] == name and not self.repaired:
                continue  # the buggy reconciler keeps its wrong M(p) until repaired
            await self.publish(name, self.true_watermark(name))

    async def sweep(self) -> None:
        assert self.sweeper is not None
        before = self.bucket.delete_requests
        paused = await self.store.get_paused() is not None
        result = await run_round(self.sweeper, self.gate, self.store)
        if paused and self.bucket.delete_requests != before:
            self.fail("a round sent deletes while GC was paused")
        self.result.events.append(
            f"round M={result.summary.safe_epoch} "
            f"hidden={result.summary.markers_written} "
            f"reclaimed={result.summary.versions_reclaimed}"
        )
        self.result.reclaimed += result.summary.versions_reclaimed

    async def wrong_watermark(self) -> None:
        """A partition holding old needed objects (mostly the one pinning M) jumps its
        M(p) to the cluster epoch - 1; a sweeper round follows."""
        holding = sorted(PARTITIONS, key=self.true_watermark)
        name = holding[0] if self.rng.random() < 0.8 else self.rng.choice(PARTITIONS)
        await self.publish(name, self.cluster_epoch - 1)
        self.bug = (name, self.clock.now)
        self.result.events.append(f"bug: {name} publishes M(p)={self.cluster_epoch - 1}")
        self.clock.now += 1.0
        await self.sweep()

    async def runbook(self) -> None:
        """Pause, restore, (sweep while paused), repair, resume, restart the sweepers."""
        assert self.bug is not None
        name, since = self.bug
        hidden = {
            key
            for key, obj in self.objects.items()
            if obj.needed and self.bucket.current(key) is None
        }
        self.result.hidden_by_bug = len(hidden)
        if not self.broken_restore:
            await self.store.set_paused("wrong M(p)")
        assert self.writer is not None
        self.writer.close()
        chosen = select(deletions_in(read_journal([self.directory])), Selection(since=since))
        results = await restore(self.bucket, chosen)
        self.restart()
        self.result.restored = sum(r.outcome.value == "restored" for r in results)
        self.restored_keys = hidden | {r.key for r in results if r.outcome.value == "restored"}
        self.check_restored("after the restore")
        for _ in range(self.rng.randint(1, 3)):  # sweepers keep running while paused
            self.clock.now += self.rng.uniform(1, 60)
            await self.sweep()
            self.check_restored("in the rounds before the repair")
        raw = await self.kv.get(self.store.partition_key(name))
        assert raw is not None
        record = PartitionRecord.decode(raw.value, partition=name)
        repaired = dataclasses.replace(record, watermark=self.true_watermark(name))
        await self.kv.txn([], [Put(self.store.partition_key(name), repaired.encode())])
        await self.store.clear_paused()
        self.repaired = True
        self.restart()
        self.result.events.append(
            f"runbook: {len(hidden)} hidden, {self.result.restored} restored, {name} repaired"
        )

    # -- the checks -----------------------------------------------------------------

    def check_lost(self) -> None:
        for key, obj in self.objects.items():
            if not obj.needed:
                continue
            bodies = [v.body for v in self.bucket.versions.get(key, [])]
            if obj.body not in bodies:
                self.fail(f"needed object {key} lost its bytes")

    def check_restored(self, when: str) -> None:
        for key in self.restored_keys:
            obj = self.objects[key]
            if obj.needed and self.bucket.current(key) != obj.body:
                self.fail(f"restored object {key} not current {when}")

    def check_final(self) -> None:
        for key, obj in self.objects.items():
            entries = self.bucket.versions.get(key, [])
            if obj.self_deleted:
                if not entries or entries[-1].body is not None:
                    self.fail(f"a writer's own delete marker on {key} was touched")
            elif entries:
                self.fail(f"garbage {key} kept {len(entries)} versions or markers after the tail")


async def _play(run: _Run, steps: int) -> None:
    rng = run.rng
    await run.setup()
    bug_step = rng.randint(steps // 4, steps // 2)
    notice_after = rng.uniform(0.0, run.window_s / 2)
    for step in range(steps):
        run.clock.now += rng.uniform(5.0, run.window_s / 12)
        action = rng.random()
        if step == bug_step:
            await run.wrong_watermark()
        elif (
            run.bug is not None and not run.repaired and run.clock.now - run.bug[1] >= notice_after
        ):
            await run.runbook()
        elif action < 0.3:
            run.upload()
        elif action < 0.45:
            run.cluster_epoch = await run.store.advance_cluster_epoch()
        elif action < 0.6:
            run.drop()
        elif action < 0.75:
            await run.publish_all()
        elif action < 0.97:
            await run.sweep()
        else:
            run.restart()
        run.check_lost()
        run.check_restored("later in the run")
    if run.bug is not None and not run.repaired:
        await run.runbook()
    for obj in run.objects.values():
        obj.needed = False
    run.cluster_epoch = await run.store.advance_cluster_epoch()
    await run.publish_all()
    for _ in range(4):  # hide, then reclaim once the window passed
        await run.sweep()
        run.clock.now += run.window_s + 1.0
    await run.sweep()
    run.check_final()


def run_undo_seed(seed: int, *, steps: int = 80, broken_restore: bool = False) -> UndoSimResult:
    """Play one seed (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="l0gc-sim-undo-") as directory:
        run = _Run(seed, Path(directory), broken_restore=broken_restore)
        with quiet_logs():
            asyncio.run(_play(run, steps))
        if run.writer is not None:
            run.writer.close()
    return run.result
