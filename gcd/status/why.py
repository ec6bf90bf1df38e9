"""`gcd status`'s "pinned longest" line and `--why`: who holds M back, and for which key.

`pinned_longest` looks at the partitions pinning M (the lowest M(p)) and, for each, walks
its record's etcd history back (`gcd.explainer.answer.HISTORY` versions at most, while not
compacted) for as long as M(p) had its current value: the earliest such publication is
since when it has pinned M (a lower bound when the history is shorter). The one pinned
longest is reported with its owner.

`why` runs `gcd explain` on the oldest kept key: the key of the lowest epoch above M, found
with one LIST per prefix directory of the default layout under the namespace's bound root
(on any store, through its backend; the endpoint is the binding's). It reads, never writes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gcd.explainer.answer import HISTORY, ExplainReport, explain_keys, read_gc_facts
from gcd.rules.explain import start_before
from gcd.rules.layout import PREFIX_COUNT, KeyLayout
from gcd.storage.backend import StoreAccess
from gcd.storage.objectstore import BucketStore
from gcd.storage.registry import backend, open_store
from l0gc.contract.binding import Binding
from l0gc.contract.record import PartitionRecord
from l0gc.errors import ConfigError, InvalidRecord, L0gcError
from l0gc.etcd.store import WatermarkStore

__all__ = ["oldest_kept_key", "pinned_longest", "why"]

_LISTS_AT_ONCE = 16


async def pinned_longest(
    store: WatermarkStore, pinning: list[tuple[str, int, str | None]], now: float
) -> dict[str, Any] | None:
    """The pinning partition at its M(p) the longest: name, M(p), owner, since (unix s)."""
    best: dict[str, Any] | None = None
    for name, watermark, owner in pinning:
        since = await _since(store, name, watermark)
        if since is None:
            continue
        if best is None or since < best["since"]:
            best = {
                "partition": name,
                "watermark": watermark,
                "owner": owner,
                "since": since,
                "for_s": round(max(0.0, now - since), 3),
            }
    return best


async def _since(store: WatermarkStore, name: str, watermark: int) -> float | None:
    key = store.partition_key(name)
    kv = store.kv
    earliest: float | None = None
    try:
        item = await kv.get(key)
        for _ in range(HISTORY):
            if item is None:
                break
            record = PartitionRecord.decode(item.value, partition=name)
            if record.watermark != watermark:
                break
            if record.updated_at is not None:
                earliest = record.updated_at
            if item.mod_revision <= 1:
                break
            older = await kv.range_prefix(key, revision=item.mod_revision - 1)
            item = next((i for i in older.items if i.key == key), None)
    except (L0gcError, InvalidRecord, TypeError, OSError):
        pass  # compacted or no history: what was seen is the lower bound
    return earliest


async def oldest_kept_key(objects: BucketStore, layout: KeyLayout, safe_epoch: int) -> str | None:
    """The key of the lowest epoch above M (one LIST per prefix directory)."""
    gate = asyncio.Semaphore(_LISTS_AT_ONCE)
    width = layout.epoch_width or 0

    async def first(prefix: int) -> str | None:
        directory = layout.prefix_dir(prefix)
        start = start_before(f"{directory}{safe_epoch + 1:0{width}d}") if width else None
        async with gate:
            page = await objects.list_page(directory, start_after=start, max_keys=1)
        return page.objects[0].key if page.objects else None

    found = [
        k for k in await asyncio.gather(*(first(p) for p in range(PREFIX_COUNT))) if k is not None
    ]
    epochs = [
        (parsed.epoch, key)
        for key in found
        if (parsed := layout.parse(key)) is not None and parsed.epoch > safe_epoch
    ]
    return min(epochs)[1] if epochs else None


async def why(
    store: WatermarkStore, binding_raw: bytes | None, grace_s: float = 600.0
) -> tuple[str | None, ExplainReport | None]:
    """(the oldest kept key, its explanation); (None, None) when no key is kept above M."""
    if binding_raw is None:
        raise ConfigError(
            "--why needs the namespace bound to its bucket (watermark namespace "
            "bind): that is where the kept keys are looked for"
        )
    target = Binding.decode(binding_raw).target
    layout = KeyLayout.default(target.root)
    facts = await read_gc_facts(store, None, grace_s=grace_s)
    if facts.safe_epoch is None:
        return None, None
    async with open_store(backend(target.kind).from_target(target, StoreAccess())) as objects:
        key = await oldest_kept_key(objects, layout, facts.safe_epoch)
        if key is None:
            return None, None
        return key, await explain_keys([key], layout, facts, objects=objects, store=store)
