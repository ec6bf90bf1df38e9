"""Playing one seed: the chaos phase, the quiescent tail and the final checks.

`play(world)` drives a `World` (`l0lab.sim.world`: the state and its plumbing) step by
step with the actions (`l0lab.sim.actions`) and the faults (`l0lab.sim.faults`). It lives
apart from the world so that the world, the actions and the faults do not import each
other: the actions and faults act on a world, and this module plays them.
"""

from __future__ import annotations

from collections.abc import Callable

from l0lab.sim import actions, faults
from l0lab.sim.world import World

__all__ = ["play"]


async def play(world: World) -> None:
    """Set up, run the chaos phase, the quiescent tail and the final checks."""
    try:
        await actions.setup(world)
        for _ in range(world.config.steps):
            await step_once(world, chaos=True)
            if world.violations and world.config.stop_on_violation:
                return
        await quiesce(world)
    finally:
        await world.cancel_all()


async def step_once(world: World, *, chaos: bool) -> None:
    """One step: time moves, one action (in the chaos phase), settle, check."""
    world.step += 1
    world.checker.step = world.step
    world.clock.advance(1.0)
    world.turnstile.open()
    await world.settle()
    actions.housekeeping(world, daemons=chaos)
    await faults.expire(world)
    if chaos:
        if world.rng.random() < world.fault_rate:
            await faults.inject(world)
        else:
            await actions.random_action(world)
    await world.settle()
    world.reap()
    await world.check_step()


# -- the quiescent tail ----------------------------------------------------------


async def _steps_until(world: World, done: Callable[[], bool], what: str) -> bool:
    """Step (no chaos) until `done()`; record TAIL_STUCK and return False if never."""
    while not done():
        if world.step >= world.config.steps + world.config.tail_limit:
            world.checker.stuck(f"tail: {what} did not finish in {world.config.tail_limit} steps")
            return False
        await step_once(world, chaos=False)
        if world.violations and world.config.stop_on_violation:
            return False
    return True


async def quiesce(world: World) -> None:
    """Heal, drain, catch up, advance idle partitions, sweep; then check liveness."""
    world.event("tail: faults off, writers stop")
    await faults.heal_all(world)
    if not await _steps_until(world, lambda: _drained(world), "draining writes"):
        return
    # No controller tells the owners where the logs end: the reconcilers' reports do.
    for _ in range(3):
        await actions.tick(world)
        actions.reconcile_all(world)
        for pub in [p for p in world.publishers if p.alive]:
            actions.start_publish_round(world, pub)
        if not await _steps_until(world, lambda: _publishers_idle(world), "publishing"):
            return
    final = await world.store.read_safe_epoch()
    world.event(f"tail: cluster epoch {world.cluster_epoch}, M {final.safe_epoch}")
    world.clock.advance(world.grace_s + 1.0)
    for _ in range(4):
        for shard in world.shards:
            if not shard.busy:
                actions.start_sweep(world, shard)
        if not await _steps_until(world, lambda: _sweepers_idle(world), "sweeping"):
            return
        if _sweeps_complete(world, final.safe_epoch):
            break
    final = await world.store.read_safe_epoch()
    world.checker.check_final(final.safe_epoch, world.cluster_epoch, world.bucket.keys())


def _drained(world: World) -> bool:
    """Commit what is ready; True once no write, adoption or deletion is in flight."""
    for writer in world.writers:
        if writer.op is not None and writer.op.fenced:
            actions.commit(world, writer)
    if any(writer.op is not None for writer in world.writers):
        return False
    if any(pub.alive and pub.stopping for pub in world.publishers):
        return False  # a clean stop is under way: its partitions move on after it
    for part in world.partitions.values():
        if part.task is not None and not part.task.done():
            return False
        if part.deleting and not part.deleted:
            return False
        if not part.deleted and (part.leader is None or not part.leader.alive):
            return False
    hosted = [(p, n) for p in world.publishers if p.alive for n in p.publisher.partitions]
    return all(world.partitions[name].leader is pub for pub, name in hosted)


def _publishers_idle(world: World) -> bool:
    return all(p.round_task is None or p.round_task.done() for p in world.publishers)


def _sweepers_idle(world: World) -> bool:
    return not any(shard.busy for shard in world.shards)


def _sweeps_complete(world: World, safe_epoch: int | None) -> bool:
    """True when every shard's last round was complete and used `safe_epoch`."""
    return all(
        shard.last is not None
        and shard.last.complete
        and shard.last.summary.safe_epoch == safe_epoch
        for shard in world.shards
    )
