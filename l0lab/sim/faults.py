"""Faults the simulator injects, and how each one ends.

- etcd outage: every `MemoryKV` call raises `EtcdUnavailable` for a few steps.
  Publishes fail and are retried, sweepers block (fail closed), writers keep their
  cached epoch.
- S3 request errors: a share of LIST and DeleteObjects requests fail with SlowDown,
  500, InternalError or ServiceUnavailable for a few steps.
- S3 per-key errors: chosen keys fail inside DeleteObjects (transient or AccessDenied)
  a few times.
- corrupt record: a partition record is blanked or replaced by garbage for a few
  steps, then restored (if nothing replaced it meanwhile).
- sweeper kill: a running round is cancelled mid-flight (possibly between a
  DeleteObjects taking effect and its answer) and the process restarts fresh.
- publisher crash: a publisher process dies with its fences and whatever it applied
  but did not publish yet; a new incarnation starts and partitions are re-adopted from
  the last published snapshot (and, usually, the log's end offset).
- publisher clean stop: SIGTERM; it drains its fences (revoking what the drain timeout
  leaves), publishes a last time (sealed when nothing was revoked) and restarts.
- failover: another publisher adopts a partition while the old owner keeps running
  for a while (a stale owner whose publishes must be refused).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gcd.storage.objectstore import status_fault
from l0gc.contract.kv import Compare, Put
from l0gc.errors import StorageError
from l0lab.sim.actions import adopt
from l0lab.sim.actors import Fault, PartitionSim, PublisherSim

if TYPE_CHECKING:
    from l0lab.sim.world import World

__all__ = ["expire", "heal_all", "inject"]

_GARBAGE = (
    b"",
    b"{",
    b"[]",
    b'{"version": 1}',
    b'{"version": 1, "watermark": "12", "created_epoch": 1}',
    b'{"version": 2, "watermark": 1, "created_epoch": 1}',
)
_REQUEST_CODES = ("SlowDown", "500", "InternalError", "ServiceUnavailable")
_KEY_CODES = ("InternalError", "SlowDown", "AccessDenied")


async def inject(world: World) -> None:
    """Start one randomly chosen fault."""
    choices = (
        (2.0, _etcd_outage),
        (2.0, _s3_errors),
        (1.0, _key_errors),
        (3.0, _corrupt_record),
        (1.5, _kill_sweeper),
        (1.0, _crash_publisher),
        (1.0, _stop_publisher),
        (3.0, _failover),
    )
    fault = world.rng.choices([f for _, f in choices], [w for w, _ in choices])[0]
    await fault(world)


async def expire(world: World) -> None:
    """End every fault whose time is up."""
    keep = []
    for fault in world.active_faults:
        if fault.until <= world.step and await fault.end():
            world.event(f"fault over: {fault.name}")
        else:
            keep.append(fault)
    world.active_faults = keep


async def heal_all(world: World) -> None:
    """End every fault now (the quiescent tail) and retire stale owners at once."""
    world.kv.unavailable = False
    for fault in world.active_faults:
        await fault.end()
    world.active_faults = []
    world.bucket.request_fault = None
    world.bucket.key_faults.clear()
    world.bucket.key_fault_budget.clear()
    world.stale = [(0, pub, name) for _, pub, name in world.stale]


def _start(world: World, name: str, steps: int, end: Callable[[], Awaitable[bool]]) -> None:
    world.active_faults.append(Fault(name, world.step + steps, end))
    world.event(f"fault: {name} for {steps} steps")


async def _etcd_outage(world: World) -> None:
    if world.kv.unavailable:
        return
    world.kv.unavailable = True

    async def end() -> bool:
        world.kv.unavailable = False
        return True

    _start(world, "etcd outage", world.rng.randint(2, 12), end)


async def _s3_errors(world: World) -> None:
    if world.bucket.request_fault is not None:
        return
    rng = random.Random(world.rng.random())
    share = rng.choice([0.2, 0.5, 0.9])

    def hook(_op: str) -> StorageError | None:
        return status_fault(rng.choice(_REQUEST_CODES)) if rng.random() < share else None

    world.bucket.request_fault = hook

    async def end() -> bool:
        world.bucket.request_fault = None
        return True

    _start(world, f"S3 errors on {share:.0%} of requests", world.rng.randint(3, 15), end)


async def _key_errors(world: World) -> None:
    keys = sorted(k for k in world.bucket.objects if world.ledger.epoch_of(k) is not None)
    for key in world.rng.sample(keys, min(4, len(keys))):
        world.bucket.key_faults[key] = world.rng.choice(_KEY_CODES)
        world.bucket.key_fault_budget[key] = world.rng.randint(1, 3)
        world.event(f"fault: DeleteObjects fails {key} with {world.bucket.key_faults[key]}")


async def _corrupt_record(world: World) -> None:
    corrupted = {
        fault.name.split()[2]
        for fault in world.active_faults
        if fault.name.startswith("record of ")
    }
    live = [p for p in world.live_partitions() if p.name not in corrupted]
    if world.kv.unavailable or not live:
        return
    part = world.rng.choice(live)
    key = world.store.partition_key(part.name)
    item = await world.kv.get(key)
    if item is None:
        return
    original = item.value
    garbage = world.rng.choice(_GARBAGE)
    written = await world.kv.txn([Compare(key, item.mod_revision)], [Put(key, garbage)])
    revision = written.revision

    async def end() -> bool:
        if world.kv.unavailable:
            return False
        current = await world.kv.get(key)
        if current is not None and current.mod_revision == revision:
            await world.kv.txn([Compare(key, revision)], [Put(key, original)])
        return True

    _start(world, f"record of {part.name} = {garbage!r}", world.rng.randint(2, 10), end)


async def _kill_sweeper(world: World) -> None:
    busy = [shard for shard in world.shards if shard.busy]
    if not busy:
        return
    shard = world.rng.choice(busy)
    assert shard.task is not None
    shard.task.cancel()
    shard.task = None
    shard.restart_process()
    world.event(f"fault: shard{shard.index} killed mid-round and restarted")


def _led_by(world: World, pub: PublisherSim) -> list[PartitionSim]:
    return [p for p in world.partitions.values() if p.leader is pub and not p.deleted]


async def _crash_publisher(world: World) -> None:
    alive = [p for p in world.publishers if p.alive and not p.stopping]
    if alive:
        _retire(world, world.rng.choice(alive), "crashed")


async def _stop_publisher(world: World) -> None:
    alive = [p for p in world.publishers if p.alive and not p.stopping]
    if not alive:
        return
    pub = world.rng.choice(alive)
    pub.stopping = True
    world.event(f"fault: {pub.name} stops cleanly (SIGTERM)")
    world.spawn(_stop_then_restart(world, pub))


async def _stop_then_restart(world: World, pub: PublisherSim) -> None:
    await pub.publisher.shutdown()  # drains fences, then the final (sealed) publish
    if pub.alive:
        _retire(world, pub, "stopped cleanly")


def _retire(world: World, pub: PublisherSim, how: str) -> None:
    """The process is gone: its fences and unpublished state with it; a new one starts."""
    led = _led_by(world, pub)
    pub.alive = False
    if pub.round_task is not None:
        pub.round_task.cancel()
    for writer in world.writers:  # fence requests in flight to the dead process fail
        op = writer.op
        if op is not None:
            for name, task in op.fences.items():
                if op.targets[name] is pub:
                    task.cancel()
    for part in led:
        part.leader = None
    world.publishers[world.publishers.index(pub)] = world.new_publisher(pub.name)
    world.event(f"fault: {pub.name} {how} (led {[p.name for p in led]}), restarted")


async def _failover(world: World) -> None:
    rng = world.rng
    led = [
        p
        for p in world.live_partitions()
        if p.leader is not None and p.leader.alive and (p.task is None or p.task.done())
    ]
    if not led:
        return
    part = rng.choice(led)
    old = part.leader
    assert old is not None
    targets = [
        p
        for p in world.publishers
        if p.alive and not p.stopping and p is not old and part.name not in p.publisher.partitions
    ]
    if not targets:
        return
    new = rng.choice(targets)
    part.task = world.spawn(adopt(world, part, new))
    world.event(f"fault: failover of {part.name} from {old.name} to {new.name}")
