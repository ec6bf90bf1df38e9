"""The canonical snapshot of an exhaustive-search state: what decides every future move.

`l0lab.sim.explore` re-runs the real code along a path of moves and, after each one,
hashes `snapshot(world, names)`, so a state reached again (by another order of moves,
or by renaming interchangeable actors) is expanded once. Two states with the same
snapshot must behave the same from then on; so the snapshot holds everything the
future of the run depends on, read from the real objects:

- etcd (`MemoryKV`): the cluster epoch and every partition record, decoded (M(p), owner,
  owner_epoch, window, the tracker snapshot, the seal, the offsets still referenced); a
  record that does not decode as its bytes. Not `updated_at` (no rule reads it back)
  nor revisions (only compared).
- every publisher slot: alive, stopping, a round running, its cached cluster epoch,
  whether its record watch exists and the partitions its pending watch events name
  (with what they would say), and per hosted partition `HostedPartition.describe()`
  (the GC state's own snapshot: applied window, floor, offsets, pending slides), the
  offsets of the entries still referenced, the guard's window and floor, each hold
  (epoch, expired or not), the exclusive flag and queue length, closed, and whether any
  fence was ever taken back.
- the simulated world: per partition its log end, reconciled offset, the offset its
  reconciler claimed (the reconciler bug), leader slot and a corrupted record; per
  writer its cached epoch and its write in flight (epoch, upload still present, per
  partition: fence pending, refused, or granted by a live or dead incarnation and
  still held or not); the sweeper's remembered highest M; releases under way; faults
  used; and the ledger's view of every object that still matters (present in the
  bucket, protected, or a write in flight): epoch, state, references (partition,
  offset) and live fences.

What it leaves out, because nothing reads it to decide: wall and virtual clock values
(time only jumps, so a hold is fresh or expired), object and fence ids, key names (the
sweeper's round is one step, so listing order changes nothing), trace text, and objects
that are gone and needed by nobody.

`names` renames writers, partitions and publisher slots; `canonical` takes the least
snapshot over every renaming (symmetry reduction: interchangeable actors).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from hashlib import blake2b
from typing import Any

from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import References
from l0gc.errors import InvalidRecord
from l0lab.sim.actors import PublisherSim
from l0lab.sim.world import World

__all__ = ["Bag", "canonical", "renamings", "snapshot"]

Names = dict[str, str]


def renamings(world: World, *, symmetry: bool) -> Iterator[Names]:
    """Every renaming of writers x partitions x publisher slots (just the identity
    without `symmetry`)."""
    writers = [w.name for w in world.writers]
    parts = sorted(world.partitions)
    pubs = [p.name for p in world.publishers]
    if not symmetry:
        yield {n: n for n in (*writers, *parts, *pubs)}
        return
    for w in itertools.permutations(writers):
        for p in itertools.permutations(parts):
            for b in itertools.permutations(pubs):
                yield {
                    **dict(zip(writers, w, strict=True)),
                    **dict(zip(parts, p, strict=True)),
                    **dict(zip(pubs, b, strict=True)),
                }


class Bag(tuple[Any, ...]):
    """A collection whose order means nothing: sorted after renaming."""

    __slots__ = ()


def _encode(value: Any, names: Names) -> str:
    """`value` renamed by `names`, as text: a tuple in order, a `Bag` sorted (by the text
    of its items), anything else by its repr. One pass, no renamed copy."""
    kind = type(value)
    if kind is str:
        return repr(names.get(value, value))
    if kind is Bag:
        return "{" + ",".join(sorted([_encode(v, names) for v in value])) + "}"
    if kind is tuple:
        return "(" + ",".join([_encode(v, names) for v in value]) + ")"
    return repr(value)


def canonical(world: World, *, symmetry: bool) -> tuple[bytes, list[Names]]:
    """The state's hash (least snapshot over the renamings) and the renamings reaching it."""
    best: str | None = None
    chosen: list[Names] = []
    base = snapshot(world)
    for names in renamings(world, symmetry=symmetry):
        encoded = _encode(base, names)
        if best is None or encoded < best:
            best, chosen = encoded, [names]
        elif encoded == best:
            chosen.append(names)
    assert best is not None
    return blake2b(best.encode(), digest_size=16).digest(), chosen


def snapshot(world: World) -> tuple[Any, ...]:
    """The state with its actors' own names (see the module docstring); `Bag`s are the
    collections whose order means nothing."""
    prefix = world.store.partitions_prefix
    records = []
    other = []
    for item in world.kv._data.values():
        if item.key.startswith(prefix):
            records.append(_record(item.key[len(prefix) :], item.value))
        else:
            other.append((item.key, item.value))
    corrupted = {f.name.split()[1] for f in world.active_faults}
    partitions = Bag(
        (
            p.name,
            p.created_epoch,
            p.next_offset,
            p.reconciled,
            p.claimed,
            p.leader.name if p.leader is not None else None,
            p.name in corrupted,
            p.deleting,
            p.deleted,
        )
        for p in world.partitions.values()
    )
    publishers = Bag(_publisher(world, pub) for pub in world.publishers)
    writers = Bag(_writer(world, w) for w in world.writers)
    keys = set(world.bucket.objects)
    for writer in world.writers:
        if writer.op is not None:
            keys.add(writer.op.key)
    keys.update(world.ledger.protected_keys())
    objects = Bag(_object(world, key) for key in keys)
    shard = world.shards[0] if world.shards else None
    sweeper = None if shard is None else (shard.gate.highest, shard.busy)
    published = Bag(world.checker._published.items())
    releasing = Bag(getattr(world, "releasing", ()))
    return (
        world.cluster_epoch,
        world.counters.get("faults", 0),
        Bag(records),
        Bag(other),
        partitions,
        publishers,
        writers,
        objects,
        sweeper,
        published,
        releasing,
        Bag(getattr(world, "read_epochs", {}).items()),
    )


@functools.lru_cache(maxsize=4096)
def _record(name: str, value: bytes) -> tuple[Any, ...]:
    try:
        record = PartitionRecord.decode(value, partition=name)
    except InvalidRecord:
        return (name, "malformed", value)
    tracker = None if record.tracker is None else _tracker(record.tracker)
    return (
        name,
        record.watermark,
        record.created_epoch,
        record.owner,
        record.owner_epoch,
        record.window,
        tracker,
        record.sealed_owner_epoch,
        _held(record.references),
    )


def _held(references: References | None) -> tuple[int, ...] | None:
    """The offsets of the entries whose keys are still referenced (one key each: the
    writer names its object; which object is the ledger's `refs`)."""
    return None if references is None else tuple(offset for offset, _ in references.entries)


def _tracker(tracker: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((k, repr(v)) for k, v in tracker.items()))  # no names inside


def _publisher(world: World, pub: PublisherSim) -> tuple[Any, ...]:
    publisher = pub.publisher
    hosted = publisher._hosted
    now = world.clock.now
    parts = []
    for name, host in hosted.items():
        guard = host.guard
        lock = guard._lock
        holds = Bag(
            (h.epoch, h.deadline is not None and h.deadline <= now, h.slid) for h in lock._holds
        )
        state = host.state
        parts.append(
            (
                name,
                host.owner_epoch,
                host.published_watermark,
                host.log_end_known,
                host.frozen is not None,
                host.dirty,
                host.sealed,
                _tracker(state.snapshot()),
                guard.window,
                guard.floor,
                holds,
                lock.exclusive,
                lock.exclusive_waiters,
                lock.closed,
                guard.taken_back > 0,
                _held(host.references.stored()),
            )
        )
    watch = publisher._records._watch
    pending: tuple[Any, ...] = ()
    if watch is not None:
        seen: int = getattr(watch, "_seen", 0)  # a MemoryKV watch: later events pend
        prefix = world.store.partitions_prefix
        pending = Bag(
            {
                _record(c.key[len(prefix) :], c.value)
                if c.value is not None
                else (c.key[len(prefix) :], "deleted")
                for c in world.kv._history
                if c.revision > seen and c.key.startswith(prefix)
            }
        )
    running = pub.round_task is not None and not pub.round_task.done()
    return (
        pub.name,
        pub.alive,
        pub.stopping,
        running,
        publisher.cluster_epoch,
        watch is not None,
        pending,
        Bag(parts),
    )


def _writer(world: World, writer: Any) -> tuple[Any, ...]:
    op = writer.op
    if op is None:
        return (writer.name, None)
    fences = []
    for name, task in op.fences.items():
        target = op.targets[name]
        if not task.done():
            status: tuple[Any, ...] = ("pending", target.name, _incarnation(world, target))
        elif task.cancelled() or task.exception() is not None or task.result() is None:
            status = ("refused",)
        else:
            grant = task.result()
            assert grant is not None
            held = grant.publisher.alive and grant.publisher.publisher.is_held(grant.token)
            status = ("granted", target.name, _incarnation(world, grant.publisher), held)
        fences.append((name, status))
    return (writer.name, (op.epoch, op.key in world.bucket.objects, Bag(fences)))


def _incarnation(world: World, pub: PublisherSim) -> bool:
    return any(p is pub for p in world.publishers) and pub.alive


def _object(world: World, key: str) -> tuple[Any, ...]:
    ledger = world.ledger
    obj = ledger._objects[key]
    refs = Bag(obj.refs)
    fences = Bag((p, world._fence_is_live(f)) for f, p in obj.fences.items())
    writers = Bag(w.name for w in world.writers if w.op is not None and w.op.key == key)
    return (
        obj.epoch,
        obj.state.value,
        key in world.bucket.objects,
        refs,
        fences,
        writers,
        ledger.protection(key) is not None,
    )
