"""What happens in one simulation step: epoch ticks, writers, reconcilers, partition
life cycle, publisher rounds and sweeper rounds, plus the per-step housekeeping that
keeps every partition led by some publisher.

Writers follow the real protocol: read the (cached, possibly stale) cluster epoch,
stamp ``max(cached, creation epochs)``, upload, fence on every partition the object
holds data for, and later commit on each partition whose fence was granted. A
partition that refuses (stale epoch, timeout, closed guard) simply does not reference
the object; if none accepts it, the object is an orphan. A commit is accepted only
from the partition's current leader (a stale leader cannot append to the log).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gcd.observe.report import RoundResult
from gcd.sweep.safety import WatermarkSource
from gcd.sweep.sweeper import run_round
from l0gc.contract.binding import claim_key
from l0gc.contract.references import References
from l0gc.contract.safe_epoch import SafeEpoch
from l0gc.errors import (
    EtcdUnavailable,
    FencingViolation,
    L0gcError,
    WriteRefused,
)
from l0lab.sim.actors import (
    HeldFence,
    PartitionSim,
    PublisherSim,
    ShardSim,
    SimObjectStore,
    WriteOp,
    WriterSim,
    shard_config,
)
from l0lab.sim.variants import LenientSafeEpoch, UncheckedSafeEpoch
from watermark.service.clock import EpochClock, stamp_epoch

if TYPE_CHECKING:
    from l0lab.sim.world import World

__all__ = [
    "housekeeping",
    "lifted_keys",
    "overreport",
    "random_action",
    "reconcile_all",
    "report_log_ends",
    "setup",
    "start_publish_round",
    "start_sweep",
    "tick",
]

_JUNK_KEYS = (
    "level_zero/data/README",
    "level_zero/data/12/000000000000000001/short-prefix",
    "level_zero/data/123/00000000000000001/short-epoch",
    "level_zero/data/123/000000000000000001/a/b",
    "level_zero/data/1a3/000000000000000001/letters",
    "level_zero/data/123/+00000000000000001/signed",
    "level_zero/data/123/000000000000000001/ trailing-space ",
    "level_zero/datax/123/000000000000000001/other-root",
    "elsewhere/123/000000000000000001/outside",
)


def _claim_nested_root(world: World, old: float) -> None:
    """Another namespace's root inside ours (issue 25): its claim and two old objects of
    epoch 0 (one sorting before the claim), in an epoch-0 directory no stranded key of ours
    uses. Deleting any of them is a violation (`gcd.sweep.nesting` keeps them)."""
    used = {key.rsplit("/", 1)[0] for key in world.bucket.objects}
    epoch_0 = (world.layout.prefix_dir(prefix) + "0" * 18 for prefix in range(123, 1000))
    nested = next(directory for directory in epoch_0 if directory not in used)
    for key in (claim_key(nested), f"{nested}/-foreign", f"{nested}/foreign"):
        world.bucket.put(key, last_modified_s=old)
        world.ledger.uploaded(key, None)


async def setup(world: World) -> None:
    """Cluster epoch, bucket contents, publishers, partitions, writers and sweepers."""
    rng = world.rng
    world.cluster_epoch = await world.store.init_cluster_epoch(rng.randint(1, 4))
    old = world.clock.now - 86_400.0
    for key in _JUNK_KEYS:
        world.bucket.put(key, last_modified_s=old)
        world.ledger.uploaded(key, None)
    for index in range(rng.randint(0, 4)):  # stranded garbage of long-gone partitions
        epoch = rng.randint(0, world.cluster_epoch - 1)
        key = world.layout.format(rng.randrange(1000), epoch, f"stranded-{index}")
        world.bucket.put(key, last_modified_s=old)
        world.ledger.uploaded(key, epoch)
    if world.config.nested_root:
        _claim_nested_root(world, old)
    world.publishers = [world.new_publisher(f"pub{i}") for i in range(rng.randint(2, 3))]
    for _ in range(rng.randint(1, 4)):
        await create_partition(world)
    for index in range(rng.randint(2, 5)):
        refresh = rng.choice([1.0, 3.0, 8.0, 20.0])
        clock = EpochClock(world.store, refresh_interval_s=refresh, now=world.clock)
        world.writers.append(WriterSim(f"w{index}", clock, patience=rng.choice([0, 1, 2, 6])))
    count = rng.randint(1, 3)
    for index in range(count):
        config = shard_config(rng, index, count, world.grace_s)
        name = f"shard{index}"
        store = SimObjectStore(world.bucket, world.turnstile, world.on_deleted, name)
        world.shards.append(ShardSim(index, count, config, store, world.clock, world.seed))
    world.event(
        f"setup epoch={world.cluster_epoch} pubs={len(world.publishers)} "
        f"writers={len(world.writers)} shards={count} grace={world.grace_s} "
        f"ttl={world.hold_ttl_s} faults={world.fault_rate} "
        f"publish={world.publish_rate} sweep={world.sweep_rate}"
    )


async def random_action(world: World) -> None:
    """Perform one randomly chosen action."""
    choices = (
        (10, tick),
        (25, write_start),
        (25, write_commit),
        (18, reconcile),
        (2, create_partition),
        (1.5, delete_partition),
    )
    action = world.rng.choices([a for _, a in choices], [w for w, _ in choices])[0]
    await action(world)


# -- cluster epoch and partitions ---------------------------------------------------


async def tick(world: World) -> None:
    """The epoch ticker advances the cluster epoch by one."""
    try:
        world.cluster_epoch = await world.store.advance_cluster_epoch()
    except L0gcError as exc:
        world.event(f"tick failed {type(exc).__name__}")
        return
    world.event(f"epoch -> {world.cluster_epoch}")


async def create_partition(world: World) -> None:
    """Register a new partition (before any write); housekeeping gives it an owner."""
    if len(world.live_partitions()) >= 6:
        return
    name = f"p{world.next_id('partition')}"
    try:
        record = await world.store.register_partition(name)
    except L0gcError as exc:
        world.event(f"create {name} failed {type(exc).__name__}")
        return
    world.ledger.partition_created(name)
    world.partitions[name] = PartitionSim(name, record.created_epoch)
    world.event(f"create {name} created_epoch={record.created_epoch}")


async def delete_partition(world: World) -> None:
    """Start deleting a partition: no new writes, then release and deregister."""
    live = world.live_partitions()
    if len(live) <= 1:
        return
    part = world.rng.choice(live)
    part.deleting = True
    world.event(f"delete {part.name} (log end {part.next_offset}, reconciled {part.reconciled})")


async def _delete_task(world: World, part: PartitionSim) -> None:
    leader = part.leader
    if leader is not None and leader.alive and leader.publisher.hosts(part.name):
        await leader.publisher.release(part.name)
    try:
        await world.store.deregister_partition(part.name)
    except L0gcError as exc:
        world.event(f"deregister {part.name} failed {type(exc).__name__}")
        return
    part.deleted = True
    part.leader = None
    world.ledger.partition_deleted(part.name)
    world.event(f"deleted {part.name}")


async def adopt(world: World, part: PartitionSim, pub: PublisherSim) -> None:
    """`pub` takes ownership of `part`; a previous live owner becomes a stale owner.

    The log's leadership moves first: from now on the old owner cannot append, so the
    log end `pub` is told is final. The old owner keeps hosting the partition for a
    while (it is stale: its publishes must be refused). Sometimes the new owner is not
    told the log end: then only a sealed record (or its first commit) tells it.
    """
    old, part.leader = part.leader, None
    if old is not None and old is not pub and old.alive:
        world.stale.append((world.step + world.rng.randint(2, 40), old, part.name))
    log_end: int | None = part.next_offset - 1
    if world.rng.random() < 0.3:
        log_end = None
    try:
        await pub.publisher.adopt(
            part.name,
            log_end_offset=log_end,
            log_references=None if log_end is None else log_references(part),
        )
    except L0gcError as exc:
        world.event(f"{pub.name} adopt {part.name} failed {type(exc).__name__}")
        return
    if not pub.alive:
        return
    if part.deleting or part.deleted:  # deleted meanwhile: stop hosting it
        world.stale.append((world.step, pub, part.name))
        return
    part.leader = pub
    state = pub.publisher.state(part.name)
    world.event(
        f"{pub.name} owns {part.name} window={state['window']} "
        f"M(p)={state['watermark']} log_end={log_end} "
        f"known={state['log_end_known']}"
    )


async def _release_stale(world: World, pub: PublisherSim, name: str) -> None:
    if pub.alive and pub.publisher.hosts(name):
        await pub.publisher.release(name)
        world.event(f"{pub.name} stale owner stops hosting {name}")


def housekeeping(world: World, *, daemons: bool) -> None:
    """Keep every live partition led (adopt), finish deletions, retire stale owners;
    with `daemons`, start publisher and sweeper rounds when their timers fire."""
    for part in world.partitions.values():
        if part.deleted or (part.task is not None and not part.task.done()):
            continue
        leader = part.leader
        if leader is not None and not _hosts(leader, part.name):
            part.leader = None
            world.event(f"{part.name} lost its leader {leader.name}")
        if part.deleting:
            part.task = world.spawn(_delete_task(world, part))
        elif part.leader is None:
            candidates = [
                p
                for p in world.publishers
                if p.alive and not p.stopping and not p.publisher.hosts(part.name)
            ]
            if candidates:
                part.task = world.spawn(adopt(world, part, world.rng.choice(candidates)))
    if daemons:  # publishers and sweepers run on their own timers (with jitter)
        for pub in world.publishers:
            idle = (
                pub.alive and not pub.stopping and (pub.round_task is None or pub.round_task.done())
            )
            if idle and world.rng.random() < world.publish_rate:
                start_publish_round(world, pub)
        for shard in world.shards:
            if not shard.busy and world.rng.random() < world.sweep_rate:
                start_sweep(world, shard)
    due = [entry for entry in world.stale if entry[0] <= world.step]
    world.stale = [entry for entry in world.stale if entry[0] > world.step]
    for _, pub, name in due:
        if world.partitions[name].leader is not pub:
            world.spawn(_release_stale(world, pub, name))


# -- writers ------------------------------------------------------------------------


async def write_start(world: World) -> None:
    """An idle writer uploads an object and asks its partitions to fence its epoch."""
    rng = world.rng
    idle = [w for w in world.writers if w.op is None]
    targets = [p for p in world.live_partitions() if p.writable]
    if not idle or not targets:
        return
    writer = rng.choice(idle)
    chosen = rng.sample(targets, rng.randint(1, min(3, len(targets))))
    try:
        cached = await writer.clock.current()
    except L0gcError as exc:
        world.event(f"{writer.name} has no epoch {type(exc).__name__}")
        return
    epoch = stamp_epoch(cached, [p.created_epoch for p in chosen])
    name = f"{writer.name}-{writer.seq}"
    writer.seq += 1
    key = world.layout.format(rng.randrange(1000), epoch, name)
    world.bucket.put(key, last_modified_s=world.clock.now)
    world.ledger.uploaded(key, epoch)
    op = WriteOp(key, epoch, {}, {}, world.step)
    for part in chosen:
        assert part.leader is not None
        op.targets[part.name] = part.leader
        op.fences[part.name] = world.spawn(_fence(world, op, part, part.leader))
    writer.op = op
    world.event(f"{name} e={epoch} cached={cached} -> {[p.name for p in chosen]}")


async def _fence(
    world: World, op: WriteOp, part: PartitionSim, pub: PublisherSim
) -> HeldFence | None:
    name = op.key.rsplit("/", 1)[1]
    try:
        token = await pub.publisher.acquire(part.name, op.epoch)
    # EtcdUnavailable: the epoch was above the publisher's cached one and the re-read
    # failed (an outage); the writer gives up as for any refusal.
    except (WriteRefused, EtcdUnavailable) as exc:
        world.event(f"{name} fence {part.name}@{pub.name} refused {type(exc).__name__}")
        return None
    grant = HeldFence(world.next_id("fence"), part.name, token, pub)
    world.grants[grant.fence_id] = grant
    world.ledger.fence_granted(grant.fence_id, op.key, part.name)
    if part.leader is pub:  # a stale owner's grant protects nothing: it cannot commit
        world.checker.on_fence_granted(op.key, part.name, op.key in world.bucket.objects)
    world.event(f"{name} fenced {part.name}@{pub.name} window={token.window} slid={token.slid}")
    return grant


async def write_commit(world: World) -> None:
    """A writer whose fences are answered commits on every partition that granted one."""
    ready = [
        w
        for w in world.writers
        if w.op is not None and w.op.fenced and world.step - w.op.started_step >= w.patience
    ]
    if ready:
        commit(world, world.rng.choice(ready))


def commit(world: World, writer: WriterSim) -> None:
    """Commit (or abandon) `writer`'s object on each partition; the writer is idle after."""
    op = writer.op
    assert op is not None
    name = op.key.rsplit("/", 1)[1]
    for task in op.fences.values():
        grant = None if task.cancelled() or task.exception() is not None else task.result()
        if grant is not None:
            _commit_one(world, op, name, grant)
    writer.op = None


def _commit_one(world: World, op: WriteOp, name: str, grant: HeldFence) -> None:
    part, pub = world.partitions[grant.partition], grant.publisher
    world.grants.pop(grant.fence_id, None)
    world.ledger.fence_finished(grant.fence_id, op.key)
    if part.deleting or part.deleted or part.leader is not pub or not pub.alive:
        if pub.alive:
            pub.publisher.abort(grant.token)
        world.event(f"{name} abandoned on {part.name}: {pub.name} cannot append")
        return
    offset = part.next_offset
    try:
        pub.publisher.commit(grant.token, offset, (op.key,))  # names its object (issue 54)
    except FencingViolation as exc:
        pub.publisher.abort(grant.token)  # the entry is in the log all the same
        world.checker.on_fencing_violation(part.name, offset, str(exc))
    except WriteRefused as exc:
        pub.publisher.abort(grant.token)
        world.event(f"{name} commit {part.name} refused {type(exc).__name__}")
        return
    part.next_offset += 1
    part.log.append(op.key)
    world.ledger.committed(op.key, part.name, offset)
    world.checker.on_committed(op.key, part.name, offset, op.key in world.bucket.objects)
    world.event(f"{name} committed {part.name}@{offset}")


# -- reconcilers --------------------------------------------------------------------


async def reconcile(world: World) -> None:
    """A reconciler lifts some entries (lagging, then jumping) and reports its offset."""
    live = world.live_partitions()
    if not live:
        return
    part = world.rng.choice(live)
    last = part.next_offset - 1
    part.seen_end = last
    if part.reconciled < last:
        jump = world.rng.choice([1, 1, 2, 3, 8])
        part.reconciled = min(last, part.reconciled + jump)
        world.ledger.reconciled(part.name, part.reconciled)
        world.event(f"reconciled {part.name} through {part.reconciled} (end {last})")
    if world.config.reconciler_bug and part.reconciled < last and world.rng.random() < 0.3:
        overreport(world, part)
    else:
        _report(part)


def overreport(world: World, part: PartitionSim) -> None:
    """The reconciler bug (issue 54): `part`'s reconciler reports the log's end lifted
    while it lifted only through `part.reconciled`, naming only the keys it did lift."""
    end = part.next_offset - 1
    assert part.reconciled < end, "nothing to over-report"
    if _report(part, end):  # the owner was told (the checker judges M(p) by what it was told)
        part.claimed = max(part.claimed, end)
        world.ledger.claimed(part.name, end)
        world.event(f"BUG {part.name}'s reconciler reports {end} lifted, lifted {part.reconciled}")


def _hosts(pub: PublisherSim, name: str) -> bool:
    return pub.alive and pub.publisher.hosts(name)


def _report(part: PartitionSim, offset: int | None = None) -> bool:
    """Report `offset` (default: what was lifted) with the log end the reconciler last
    read: read again now (after the previous answer) when the owner's last answer wanted
    it, as docs/integration.md says; otherwise the old read goes along anyway, which may
    predate the owner's adoption (the owner must ignore a log end it did not ask for).

    The report names the key of every entry lifted so far, not only those lifted since
    the last report: an owner that restored an older record (after a crash, a failover)
    holds references an earlier report released, and only a later report that names
    them again releases them (`ReferenceSet.release` keeps what a report does not name).
    True when an owner took the report."""
    leader = part.leader
    if leader is None or not _hosts(leader, part.name):
        return False
    if leader.publisher.state(part.name)["log_end_wanted"]:
        part.seen_end = part.next_offset - 1
    log_end = part.seen_end  # -1: nothing lifted (empty log)
    leader.publisher.reconciled(
        part.name,
        part.reconciled if offset is None else offset,
        log_end_offset=log_end,
        objects=lifted_keys(part),
        log_references=log_references(part, log_end),
    )
    return True


def lifted_keys(part: PartitionSim) -> frozenset[str]:
    """The keys of the entries `part`'s reconciler has really lifted."""
    return frozenset(part.log[: part.reconciled + 1])


def log_references(part: PartitionSim, through: int | None = None) -> References:
    """The keys `part`'s log entries name, through `through` (default: the log end): what
    a log end is told with (`HostedPartition.learn_log_end`; the owner keeps those of
    the entries it never applied)."""
    end = len(part.log) if through is None else through + 1
    return References(tuple((offset, (key,)) for offset, key in enumerate(part.log[:end])))


async def report_log_ends(world: World) -> None:
    """Partition leaders tell an owner that does not know it where their log ends."""
    for part in world.live_partitions():
        leader = part.leader
        if leader is None or not _hosts(leader, part.name):
            continue
        if not leader.publisher.state(part.name)["log_end_known"]:
            await leader.publisher.adopt(
                part.name, log_end_offset=part.next_offset - 1, log_references=log_references(part)
            )
            world.event(f"{part.name} tells {leader.name} its log ends at {part.next_offset - 1}")


def reconcile_all(world: World) -> None:
    """Every reconciler catches up with its log and reports (the quiescent tail)."""
    for part in world.live_partitions():
        part.reconciled = part.next_offset - 1
        if part.reconciled >= 0:
            world.ledger.reconciled(part.name, part.reconciled)
        _report(part)


# -- publishers and sweepers ----------------------------------------------------------


def start_publish_round(world: World, pub: PublisherSim) -> None:
    """Start `pub.run_once()` as a task."""
    pub.round_task = world.spawn(_publish_round(world, pub))


async def _publish_round(world: World, pub: PublisherSim) -> None:
    await pub.publisher.run_once()
    published = {
        name: pub.publisher.state(name)["published_watermark"] for name in pub.publisher.partitions
    }
    world.event(f"{pub.name} published {published}")


def start_sweep(world: World, shard: ShardSim) -> None:
    """Start one `run_round` of `shard` as a task."""
    shard.task = world.spawn(_sweep_round(world, shard))


class _CheckedSource:
    """The sweeper's safe-epoch source, with every M it reads checked against the truth."""

    def __init__(self, world: World, source: WatermarkSource, shard: str) -> None:
        self._world, self._source, self._shard = world, source, shard

    async def read_safe_epoch(self) -> SafeEpoch:
        read = await self._source.read_safe_epoch()
        if read.safe_epoch is not None:
            self._world.checker.check_safe_epoch(read.safe_epoch, f"M read by {self._shard}")
        return read


async def _sweep_round(world: World, shard: ShardSim) -> RoundResult:
    source: WatermarkSource = (
        LenientSafeEpoch(world.store) if world.variant.lenient_sweeper else world.store
    )
    if not world.variant.cross_check:
        source = UncheckedSafeEpoch(source)
    checked = _CheckedSource(world, source, f"shard{shard.index}")
    result = await run_round(shard.sweeper, shard.gate, checked)
    summary = result.summary
    shard.last = result
    world.event(
        f"shard{shard.index} round M={summary.safe_epoch} listed={summary.listed} "
        f"deleted={summary.deleted} errors={summary.errors} "
        f"blocked={summary.blocked_reason is not None}"
    )
    if summary.reference_conflicts:  # the second opinion: M is wrong, the round kept all
        root = len(world.layout.listing_root)
        shown = [key[root:] for key in summary.conflicting_keys[:2]]
        detail = (
            f"shard{shard.index} conflict: {summary.reference_conflicts} referenced keys at "
            f"or below M, e.g. {shown}: nothing deleted"
        )
        world.checker.on_conflict(detail)
        world.event(detail)
    return result
