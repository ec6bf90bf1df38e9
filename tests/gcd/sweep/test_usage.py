"""The usage record a round adds to (`gcd.sweep.usage`): what `gcd status` calls
reclaimed is what was freed, never a key only hidden by the undo window (issue 55)."""

from __future__ import annotations

from gcd.observe.report import RoundSummary
from gcd.rules.prices import DEFAULT_PRICES
from gcd.rules.usage import Usage
from gcd.sweep.usage import UsageRecorder
from l0gc.etcd.memory import MemoryKV

HOUR = 490_000


async def test_hidden_keys_are_not_counted_as_reclaimed_their_freed_versions_are() -> None:
    kv = MemoryKV()
    record = UsageRecorder(
        kv, "/ns/usage/0-of-1", DEFAULT_PRICES["s3"], clock=lambda: HOUR * 3600.0
    )
    await record(RoundSummary(list_requests=2, delete_requests=1, deleted=20, markers_written=20))
    await record(
        RoundSummary(
            list_requests=1,
            delete_requests=1,
            deleted=40,
            deleted_bytes=4096,
            versions_reclaimed=40,
        )
    )
    item = await kv.get("/ns/usage/0-of-1")
    assert item is not None
    lists, deletes, deleted, freed = Usage.decode(item.value, "test").hours[HOUR][:4]
    assert (lists, deletes, deleted, freed) == (3, 2, 40, 4096)
