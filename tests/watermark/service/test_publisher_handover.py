"""A hand-over's sealed publish is never overwritten by a publish round of the same
publisher that was in flight when the hand-over began.

Found by a fresh-clone run of the everyday tier (2026-12-02,
`test_a_rolling_restart_hands_every_partition_over_with_one_retry_at_most`): a replica
logged `replica_handed_over sealed=True` and the next owner adopted 25 ms later with
`log_end: unknown`. The periodic round had read the record before the hand-over, its
transaction lost the compare to the sealed publish, and its retry (same owner, same
owner_epoch: allowed) wrote the record again without the seal. The next owner then had
to wait for its reconciler before any idle advance. Publishes of one publisher are now
serialised (`Publisher.publish_now`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from l0gc.contract.kv import Compare, Delete, Put, TxnResult
from l0gc.etcd.memory import MemoryKV
from tests.publishing import new_publishing

_TURNS_BOUND = 10_000
"""Loop turns after which neither outcome happened: a test bug, reported as such."""


def _blocked_or_done(task: asyncio.Task[dict[str, bool]], lock: asyncio.Lock | None) -> bool:
    """The hand-over has finished (no lock stopped it), or waits for the round's turn."""
    return task.done() or bool(getattr(lock, "_waiters", None))


class HandOverMidRound(MemoryKV):
    """An etcd whose first transaction (the round's publish) waits until the hand-over
    started by `start_during` has finished or is waiting for the publish lock."""

    def __init__(self) -> None:
        super().__init__()
        self.during: asyncio.Task[dict[str, bool]] | None = None
        self.start_during: Callable[[], asyncio.Task[dict[str, bool]]] | None = None
        self.lock: asyncio.Lock | None = None

    async def txn(self, compares: Sequence[Compare], ops: Sequence[Put | Delete]) -> TxnResult:
        if self.start_during is not None and self.during is None:
            self.during = self.start_during()
            for _ in range(_TURNS_BOUND):
                if _blocked_or_done(self.during, self.lock):
                    break
                await asyncio.sleep(0)  # one turn of the loop for the hand-over task
            else:
                raise AssertionError("the hand-over neither finished nor waited for its turn")
        return await super().txn(compares, ops)


async def test_a_round_in_flight_does_not_unseal_a_hand_over() -> None:
    kv = HandOverMidRound()
    world = await new_publishing(kv, namespace="/l0gc/handover", registered=("p",))
    store = world.store
    publisher = await world.adopting("pub-a", "p", log_end_offset=-1)
    await publisher.advance_idle(5)  # dirty: the next round publishes it
    kv.lock = getattr(publisher, "_publish_lock", None)  # what the hand-over waits on
    kv.start_during = lambda: asyncio.ensure_future(publisher.hand_over(["p"]))
    await publisher.publish_now()  # the round; the hand-over starts inside its txn
    assert kv.during is not None
    assert await kv.during == {"p": True}  # the hand-over says it sealed the record
    record = await store.get_partition("p")
    assert record is not None
    assert record.sealed_owner_epoch == record.owner_epoch, record
    taken = await store.acquire_ownership("p", "pub-b")
    assert taken.log_is_complete  # the next owner knows where the log ends
