"""The exhaustive checker's world: a small cluster whose every choice is a named move.

`l0lab.sim.explore` enumerates schedules; this module says what one schedule does. A
`Scope` fixes the cluster (partitions, writers, publishers, the highest cluster epoch,
how many faults); `start` builds it on a `World` (`l0lab.sim.world`: the same real
`Publisher`, `FencingGuard`, `PartitionGcState`, `WatermarkStore` on `MemoryKV`, sweeper
and ledger as the random simulation), `enabled` lists the moves possible now, in a fixed
order, and `perform` runs one and lets every task run until all are blocked. Nothing is
drawn at random: where the random simulation rolls a die, a move names the outcome.

Moves (a label each; the labels are the counterexample's steps and `--replay`'s input):

====================  ===============================================================
``tick``              the epoch ticker advances the cluster epoch (up to the scope's max)
``write W P[+Q] E``   idle writer W, having read cluster epoch E (any epoch from the one
                      it read last up to the current one: a stale cache is a choice),
                      stamps max(E, created epochs), uploads, and asks each
                      partition's leader for a fence (granted, refused or left
                      waiting behind a slide)
``commit W``          W's fences are all answered: commit on each granted partition
``reconcile P``       P's reconciler lifts the next log entry and reports it
``publish B``         publisher B runs one round (record watch, idle advances, publish)
``sweep``             one complete sweeper round (`run_round`) against the bucket
``adopt P B``         leaderless P is adopted by B (told the log end)
``release B P``       B, a stale owner of P after a failover, stops hosting it
``heal P``            P's corrupted record is restored
====================  ===============================================================

Faults (at most `Scope.faults` on a path): ``crash B`` (the process dies with its
fences and unpublished state; a new incarnation starts), ``stop B`` (SIGTERM: drain,
sealed publish, restart), ``failover P B`` (B adopts P while the old owner keeps
running, stale), ``corrupt P`` (P's record is replaced by garbage until ``heal P``),
``raise P`` (an operator's `watermark partition repair --watermark` raises M(p) to the
highest value no protected object of P forbids, and the owner learns it before it
grants another fence, as `--force`'s revocation guarantees), ``expire`` (virtual time
jumps past every hold deadline and fence timeout: every writer was slow); and, only when
named in `Scope.fault_kinds` (`BUG_KINDS`), ``overreport P`` (P's reconciler reports its
log's end lifted, naming only the keys it did lift: the reconciler bug of issue 54).

Abstractions, all on the side of a harsher world: every object's upload time is far in
the past (no grace period protects it); a sweeper round is one step (it reads M and
deletes at once; an M read earlier is lower, since M only rises, so it deletes a subset);
publisher rounds and adoptions complete within their step (etcd answers at once, as in
the random simulation); time stands still except at ``expire``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gcd.observe.metrics import SweeperMetrics
from gcd.rules.admission import SafetyGate
from gcd.rules.backoff import Backoff
from gcd.storage.retry import Retrier
from gcd.sweep.sweeper import RoundConfig, Sweeper
from l0gc.contract.kv import Compare, Put
from l0gc.contract.record import PartitionRecord
from l0gc.errors import InvalidRecord, L0gcError
from l0lab.sim import actions, faults
from l0lab.sim.actors import (
    Fault,
    PartitionSim,
    PublisherSim,
    ShardSim,
    SimObjectStore,
    WriteOp,
    WriterSim,
)
from l0lab.sim.world import World
from watermark.service.clock import EpochClock, stamp_epoch
from watermark.service.metrics import WatermarkMetrics

__all__ = [
    "BUG_KINDS",
    "FAULT_KINDS",
    "ExWorld",
    "Move",
    "Scope",
    "enabled",
    "footprint",
    "parse",
    "perform",
    "start",
]

FAULT_KINDS = frozenset({"crash", "stop", "failover", "corrupt", "raise", "expire"})
BUG_KINDS = frozenset({"overreport"})
"""Faults of the system around l0gc, injected only when named (`--fault-kinds`)."""
_GARBAGE = b'{"version": 1}'
_FOREVER = 10**9
_NEVER = 1e12
_SWEEP_TURNS = 200


@dataclass(frozen=True, slots=True)
class Scope:
    """The bounded cluster the checker explores (the `gcd simulate --exhaustive` flags)."""

    partitions: int = 2
    writers: int = 2
    publishers: int = 2
    max_epoch: int = 3
    faults: int = 1
    depth: int = 4
    fault_kinds: frozenset[str] = FAULT_KINDS

    def __post_init__(self) -> None:
        checks = (
            (1 <= self.partitions <= 3, f"--partitions {self.partitions} must be 1-3"),
            (1 <= self.writers <= 3, f"--writers {self.writers} must be 1-3"),
            (1 <= self.publishers <= 3, f"--publishers {self.publishers} must be 1-3"),
            (2 <= self.max_epoch <= 6, f"--max-epoch {self.max_epoch} must be 2-6"),
            (0 <= self.faults <= 4, f"--max-faults {self.faults} must be 0-4"),
            (1 <= self.depth <= 60, f"--depth {self.depth} must be 1-60"),
            (
                self.fault_kinds <= FAULT_KINDS | BUG_KINDS,
                f"unknown fault kinds {sorted(self.fault_kinds - FAULT_KINDS - BUG_KINDS)}",
            ),
        )
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def flags(self) -> str:
        """The command-line flags that give this scope."""
        kinds = (
            ""
            if self.fault_kinds == FAULT_KINDS
            else (" --fault-kinds " + ",".join(sorted(self.fault_kinds)))
        )
        return (
            f"--partitions {self.partitions} --writers {self.writers} "
            f"--publishers {self.publishers} --max-epoch {self.max_epoch} "
            f"--max-faults {self.faults} --depth {self.depth}{kinds}"
        )


@dataclass(frozen=True, slots=True, order=True)
class Move:
    """One choice: `kind` and its actors (names), e.g. ``Move("write", ("w0", "p0+p1"))``."""

    kind: str
    args: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``kind arg ...``, as printed in traces and read by `parse`."""
        return " ".join((self.kind, *self.args))

    @property
    def is_fault(self) -> bool:
        """True for the moves the fault budget counts."""
        return self.kind in FAULT_KINDS or self.kind in BUG_KINDS

    def renamed(self, names: dict[str, str]) -> Move:
        """The same move with actors renamed (`names` maps old to new; others stay)."""
        args = tuple("+".join(sorted(names.get(n, n) for n in a.split("+"))) for a in self.args)
        return Move(self.kind, args)


_ARITY = {
    "tick": 0,
    "write": 3,
    "commit": 1,
    "reconcile": 1,
    "publish": 1,
    "sweep": 0,
    "adopt": 2,
    "release": 2,
    "heal": 1,
    "crash": 1,
    "stop": 1,
    "failover": 2,
    "corrupt": 1,
    "raise": 1,
    "expire": 0,
    "overreport": 1,
}


def parse(label: str) -> Move:
    """The move a label names; ValueError naming the label otherwise."""
    kind, *args = label.split()
    if _ARITY.get(kind) != len(args):
        raise ValueError(
            f"{label!r} is not a move: expected one of "
            + ", ".join(f"'{k}'+{n} args" for k, n in _ARITY.items())
        )
    return Move(kind, tuple(args))


# -- the world ---------------------------------------------------------------------


@functools.cache
def _metrics() -> tuple[WatermarkMetrics, SweeperMetrics]:
    """One set of metrics for every process of every path: building a registry costs ~20
    ms, and nothing in the system reads its own metrics back."""
    return WatermarkMetrics(), SweeperMetrics()


class ExWorld(World):
    """A `World` that also knows which stale owners are releasing a partition, and
    whose processes share one metrics registry."""

    releasing: set[tuple[str, str]]
    read_epochs: dict[str, int]
    """The cluster epoch each writer read last (it never reads a lower one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.releasing = set()
        self.read_epochs = {}

    def new_publisher(self, slot: str, **extra: Any) -> PublisherSim:
        """A publisher process, as `World.new_publisher`, with the shared metrics and no
        instrumentation hook (nothing reads it, and it costs a third of the time)."""
        return super().new_publisher(slot, metrics=_metrics()[0], hook=None, **extra)


_SWEEPER_SLOT: Any = ShardSim.__dict__["sweeper"]  # the slot `_Shard.sweeper` fills lazily


class _Shard(ShardSim):
    """A sweeper replica whose processes share the metrics, and whose `Sweeper` is built
    at its first round: building one costs ~2 ms (a quarter of a short path's replay),
    and most paths never sweep."""

    def restart_process(self) -> None:
        """A fresh sweeper process (as `ShardSim.restart_process`), built when used."""
        with contextlib.suppress(AttributeError):  # not built yet
            _SWEEPER_SLOT.__delete__(self)
        self.gate = SafetyGate()
        self.last = None
        self.restarts += 1

    @property
    def sweeper(self) -> Sweeper:  # type: ignore[override]
        """The process's `Sweeper`, built on first use."""
        try:
            built: Sweeper = _SWEEPER_SLOT.__get__(self, ShardSim)
        except AttributeError:
            retrier = Retrier(self.config.backoff, rng=random.Random(self.restarts - 1))
            built = Sweeper(
                self.store,
                self.config,
                retrier=retrier,
                clock=self.clock,
                monotonic=self.clock,
                metrics=_metrics()[1],
            )
            _SWEEPER_SLOT.__set__(self, built)
        return built


async def start(world: ExWorld, scope: Scope) -> None:
    """Build the scope's initial state: epoch 1, every partition registered and led by
    publisher ``i % publishers``, every writer having read epoch 1, one sweeper."""
    world.grace_s, world.hold_ttl_s, world.fence_timeout_s = 1.0, 20.0, 10.0
    world.cluster_epoch = await world.store.init_cluster_epoch(1)
    world.publishers = [world.new_publisher(f"pub{i}") for i in range(scope.publishers)]
    for index in range(scope.partitions):
        name = f"p{index}"
        record = await world.store.register_partition(name)
        world.ledger.partition_created(name)
        part = world.partitions[name] = PartitionSim(name, record.created_epoch)
        pub = world.publishers[index % scope.publishers]
        await pub.publisher.adopt(name, log_end_offset=-1)
        part.leader = pub
    for index in range(scope.writers):
        clock = EpochClock(world.store, refresh_interval_s=_NEVER, now=world.clock)
        world.writers.append(WriterSim(f"w{index}", clock, patience=0))
        world.read_epochs[f"w{index}"] = world.cluster_epoch
    config = RoundConfig(
        grace_s=world.grace_s,
        batch_size=50,
        concurrency=1,
        list_concurrency=1,
        page_size=100,
        backoff=Backoff(base_s=0.5, cap_s=3.0, max_attempts=4),
    )
    store = SimObjectStore(world.bucket, world.turnstile, world.on_deleted, "shard0")
    world.shards.append(_Shard(0, 1, config, store, world.clock, 0))
    world.event(
        f"start epoch=1 partitions={scope.partitions} writers={scope.writers} "
        f"publishers={scope.publishers}"
    )
    await world.check_step()


def faults_used(world: World) -> int:
    """Faults performed so far on this path."""
    return world.counters.get("faults", 0)


def _corrupted(world: World) -> set[str]:
    return {fault.name.split()[1] for fault in world.active_faults}


def enabled(world: World, scope: Scope) -> list[Move]:
    """Every move possible now, in a fixed order (faults last)."""
    moves = list(_ordinary(world, scope))
    if faults_used(world) < scope.faults:
        moves += [m for m in _faults(world, scope) if m.kind in scope.fault_kinds]
    return moves


def _ordinary(world: World, scope: Scope) -> Iterator[Move]:
    if world.cluster_epoch < scope.max_epoch:
        yield Move("tick")
    live = [p for p in world.partitions.values() if not p.deleted]
    writable = [p.name for p in live if p.writable]
    subsets = [[n] for n in writable] + [list(pair) for pair in itertools.combinations(writable, 2)]
    reads = getattr(world, "read_epochs", {})
    for writer in world.writers:
        if writer.op is None:
            for epoch in range(
                reads.get(writer.name, world.cluster_epoch), world.cluster_epoch + 1
            ):
                yield from (Move("write", (writer.name, "+".join(s), str(epoch))) for s in subsets)
        elif writer.op.fenced:
            yield Move("commit", (writer.name,))
    for part in live:
        if part.reconciled < part.next_offset - 1:
            yield Move("reconcile", (part.name,))
    for pub in world.publishers:
        if pub.alive and not pub.stopping and (pub.round_task is None or pub.round_task.done()):
            yield Move("publish", (pub.name,))
    yield Move("sweep")
    for part in live:
        if part.leader is None and (part.task is None or part.task.done()):
            for pub in world.publishers:
                if _free(pub, part.name):
                    yield Move("adopt", (part.name, pub.name))
    for pub in world.publishers:
        for name in pub.publisher.partitions if pub.alive else []:
            if world.partitions[name].leader is not pub and (pub.name, name) not in getattr(
                world, "releasing", ()
            ):
                yield Move("release", (pub.name, name))
    for name in sorted(_corrupted(world)):
        yield Move("heal", (name,))


def _free(pub: PublisherSim, name: str) -> bool:
    return pub.alive and not pub.stopping and name not in pub.publisher.partitions


def _faults(world: World, scope: Scope) -> Iterator[Move]:
    for pub in world.publishers:
        if pub.alive and not pub.stopping:
            yield Move("crash", (pub.name,))
            yield Move("stop", (pub.name,))
    for part in world.partitions.values():
        if part.leader is not None and part.leader.alive:
            for pub in world.publishers:
                if pub is not part.leader and _free(pub, part.name):
                    yield Move("failover", (part.name, pub.name))
    corrupted = _corrupted(world)
    for part in world.partitions.values():
        if part.name not in corrupted:
            yield Move("corrupt", (part.name,))
    for part in world.partitions.values():
        if _raise_target(world, part) is not None:
            yield Move("raise", (part.name,))
    if any(w.op is not None for w in world.writers):
        yield Move("expire")
    for part in world.partitions.values():
        if part.reconciled < part.next_offset - 1 and part.leader is not None:
            yield Move("overreport", (part.name,))


def _raise_target(world: World, part: PartitionSim) -> int | None:
    """The M(p) an operator may raise P to (nothing of P that is protected is at or below
    it, and it is below the cluster epoch), if above the stored one and P is readable."""
    stored = world.checker._published.get(part.name)
    if stored is None or part.name in _corrupted(world):
        return None
    lowest = world.ledger.lowest_protected().get(part.name)
    target = (
        world.cluster_epoch - 1 if lowest is None else min(world.cluster_epoch - 1, lowest[0] - 1)
    )
    return target if target > stored else None


def footprint(move: Move, world: World) -> tuple[frozenset[str], frozenset[str]]:
    """What `move` may read and write, as resource names (for partial-order reduction:
    two moves commute when neither writes what the other reads or writes)."""
    kind, args = move.kind, move.args
    if move.is_fault or kind in ("adopt", "release", "heal", "sweep", "publish"):
        return frozenset(), frozenset({"*"})  # conflicts with everything
    if kind == "tick":
        return frozenset(), frozenset({"epoch"})
    if kind == "reconcile":
        return frozenset(), frozenset({f"log:{args[0]}"})
    writer = next(w for w in world.writers if w.name == args[0])
    if kind == "write":
        parts = args[1].split("+")
        leaders = [world.partitions[p].leader for p in parts]
        # A fence above the publisher's cached epoch re-reads it from etcd.
        return (
            frozenset({"epoch"}),
            frozenset(
                {
                    writer.name,
                    "bucket",
                    *(f"fence:{p}" for p in parts),
                    *(f"pub:{b.name}" for b in leaders if b is not None),
                }
            ),
        )
    op = writer.op
    parts = [] if op is None else list(op.fences)
    return (
        frozenset({"bucket"}),
        frozenset({writer.name, *(f"fence:{p}" for p in parts), *(f"log:{p}" for p in parts)}),
    )


# -- performing a move ---------------------------------------------------------------


async def perform(world: World, scope: Scope, move: Move) -> None:
    """Run `move` (which must be enabled), then let every task run until all block."""
    world.step += 1
    world.checker.step = world.step
    world.event(f"> {move.label}")
    if move.is_fault:
        world.counters["faults"] = faults_used(world) + 1
    await _MOVES[move.kind](world, scope, *move.args)
    await _settle_all(world)
    world.reap()
    for part in world.partitions.values():
        leader = part.leader
        if leader is not None and not (leader.alive and part.name in leader.publisher.partitions):
            part.leader = None
            world.event(f"{part.name} lost its leader {leader.name}")
    await world.check_step()


async def _settle_all(world: World) -> None:
    """Settle; a sweeper round's requests pass the turnstile until the round ends."""
    await world.settle()
    for _ in range(_SWEEP_TURNS):
        if not any(shard.busy for shard in world.shards):
            return
        world.turnstile.open()
        await world.settle()
    raise RuntimeError(f"a sweeper round did not end within {_SWEEP_TURNS} requests")


def _writer(world: World, name: str) -> WriterSim:
    return next(w for w in world.writers if w.name == name)


def _pub(world: World, name: str) -> PublisherSim:
    return next(p for p in world.publishers if p.name == name)


async def _tick(world: World, scope: Scope) -> None:
    await actions.tick(world)


async def _write(world: World, scope: Scope, name: str, targets: str, read: str) -> None:
    writer = _writer(world, name)
    chosen = [world.partitions[p] for p in targets.split("+")]
    cached = int(read)
    if isinstance(world, ExWorld):
        world.read_epochs[name] = cached
    epoch = stamp_epoch(cached, [p.created_epoch for p in chosen])
    label = f"{name}-{writer.seq}"
    writer.seq += 1
    key = world.layout.format(0, epoch, label)
    world.bucket.put(key, last_modified_s=world.clock.now - 86_400.0)
    world.ledger.uploaded(key, epoch)
    op = WriteOp(key, epoch, {}, {}, world.step)
    for part in chosen:
        assert part.leader is not None
        op.targets[part.name] = part.leader
        op.fences[part.name] = world.spawn(actions._fence(world, op, part, part.leader))
    writer.op = op
    world.event(f"{label} e={epoch} cached={cached} -> {targets}")


async def _commit(world: World, scope: Scope, name: str) -> None:
    actions.commit(world, _writer(world, name))


async def _reconcile(world: World, scope: Scope, name: str) -> None:
    part = world.partitions[name]
    part.reconciled += 1
    world.ledger.reconciled(part.name, part.reconciled)
    world.event(f"reconciled {name} through {part.reconciled} (end {part.next_offset - 1})")
    leader = part.leader
    if leader is not None and leader.alive and name in leader.publisher.partitions:
        leader.publisher.reconciled(name, part.reconciled, objects=actions.lifted_keys(part))


async def _publish(world: World, scope: Scope, name: str) -> None:
    actions.start_publish_round(world, _pub(world, name))


async def _sweep(world: World, scope: Scope) -> None:
    shard = world.shards[0]
    if not shard.busy:
        actions.start_sweep(world, shard)


async def _adopt(world: World, scope: Scope, name: str, pub_name: str) -> None:
    part, pub = world.partitions[name], _pub(world, pub_name)
    old, part.leader = part.leader, None
    try:
        state = await pub.publisher.adopt(
            name,
            log_end_offset=part.next_offset - 1,
            log_references=actions.log_references(part),
        )
    except L0gcError as exc:
        part.leader = old if old is not None and old.alive else None
        world.event(f"{pub_name} adopt {name} failed {type(exc).__name__}")
        return
    part.leader = pub
    world.event(f"{pub_name} owns {name} window={state['window']} M(p)={state['watermark']}")


async def _release(world: World, scope: Scope, pub_name: str, name: str) -> None:
    pub = _pub(world, pub_name)
    assert isinstance(world, ExWorld)
    releasing = world.releasing
    releasing.add((pub_name, name))

    async def release() -> None:
        try:
            await actions._release_stale(world, pub, name)
        finally:
            releasing.discard((pub_name, name))

    world.spawn(release())


async def _heal(world: World, scope: Scope, name: str) -> None:
    for fault in [f for f in world.active_faults if f.name.split()[1] == name]:
        await fault.end()
        world.active_faults.remove(fault)
        world.event(f"fault over: {fault.name}")


async def _crash(world: World, scope: Scope, name: str) -> None:
    faults._retire(world, _pub(world, name), "crashed")


async def _stop(world: World, scope: Scope, name: str) -> None:
    pub = _pub(world, name)
    pub.stopping = True
    world.event(f"fault: {name} stops cleanly (SIGTERM)")
    world.spawn(faults._stop_then_restart(world, pub))


async def _failover(world: World, scope: Scope, name: str, pub_name: str) -> None:
    world.event(f"fault: failover of {name} to {pub_name}")
    await _adopt(world, scope, name, pub_name)


async def _corrupt(world: World, scope: Scope, name: str) -> None:
    key = world.store.partition_key(name)
    item = await world.kv.get(key)
    assert item is not None
    original = item.value
    written = await world.kv.txn([Compare(key, item.mod_revision)], [Put(key, _GARBAGE)])
    revision = written.revision

    async def end() -> bool:
        current = await world.kv.get(key)
        if current is not None and current.mod_revision == revision:
            await world.kv.txn([Compare(key, revision)], [Put(key, original)])
        return True

    world.active_faults.append(Fault(f"record {name} corrupted", _FOREVER, end))
    world.event(f"fault: record of {name} = {_GARBAGE!r}")


async def _raise(world: World, scope: Scope, name: str) -> None:
    target = _raise_target(world, world.partitions[name])
    assert target is not None
    key = world.store.partition_key(name)
    item = await world.kv.get(key)
    assert item is not None
    try:
        current = PartitionRecord.decode(item.value, partition=name)
    except InvalidRecord:
        return
    record = dataclasses.replace(current, watermark=target)
    await world.kv.txn([Compare(key, item.mod_revision)], [Put(key, record.encode())])
    world.event(f"fault: operator raises M({name}) from {current.watermark} to {target}")
    for pub in world.publishers:  # the owner learns it before granting another fence
        if pub.alive and name in pub.publisher.partitions:
            await pub.publisher.check_records()


async def _overreport(world: World, scope: Scope, name: str) -> None:
    actions.overreport(world, world.partitions[name])


async def _expire(world: World, scope: Scope) -> None:
    world.clock.advance(max(world.hold_ttl_s, world.fence_timeout_s) + 1.0)
    world.event("fault: time jumps past every hold deadline and fence timeout")


_MOVES: dict[str, Callable[..., Awaitable[None]]] = {
    "tick": _tick,
    "write": _write,
    "commit": _commit,
    "reconcile": _reconcile,
    "publish": _publish,
    "sweep": _sweep,
    "adopt": _adopt,
    "release": _release,
    "heal": _heal,
    "crash": _crash,
    "stop": _stop,
    "failover": _failover,
    "corrupt": _corrupt,
    "raise": _raise,
    "expire": _expire,
    "overreport": _overreport,
}
