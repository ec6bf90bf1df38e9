"""A generator-backed object store: listings synthesised on the fly, O(1) memory.

`SyntheticStore` implements the sweeper's `ObjectStore` protocol over a bucket that
is never materialised: every chosen 3-digit prefix holds `garbage` objects at epochs
1..garbage (all at or below the safe epoch `safe_epoch`) followed by `live` objects at
epochs above it, one object per epoch, in the default key layout. Key number i of the
whole bucket is computed from i, so a page costs the same at 50 thousand objects as at
50 million, and the store's own memory does not grow with the bucket: that is what lets
the client-cost benchmark read the sweeper's RSS without the fake's objects in it.

Deletes are counted, not applied (a round lists each key once, so the listing does not
need to change during it). The store measures its own CPU time (`own_cpu_s`) so that a
benchmark can subtract it from the process CPU of a round, and can add a fixed delay to
every request (`delay_s`) to model a far-away region without any server in the way.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.common import ROOT
from gcd.storage.objectstore import DeleteResult, ListPage, ObjectInfo

__all__ = ["BucketShape", "SyntheticStore"]

_NAME = "0b8e1c2d-3f4a-4b5c-8d6e-7f8091a2b3c4"  # a uuid-sized object name


@dataclass(frozen=True, slots=True)
class BucketShape:
    """Which prefixes hold objects, and how many garbage and live objects each holds."""

    prefixes: tuple[int, ...]
    garbage: int
    live: int

    @property
    def safe_epoch(self) -> int:
        """M: the highest garbage epoch (live epochs start right above it)."""
        return self.garbage

    @property
    def per_prefix(self) -> int:
        """Objects in each prefix."""
        return self.garbage + self.live

    @property
    def total_garbage(self) -> int:
        """Garbage objects in the bucket."""
        return self.garbage * len(self.prefixes)

    @property
    def total(self) -> int:
        """Objects in the bucket."""
        return self.per_prefix * len(self.prefixes)

    @classmethod
    def spread(cls, prefix_count: int, garbage: int, live: int) -> BucketShape:
        """`prefix_count` prefixes spread evenly over 000-999."""
        step = 1000 // prefix_count
        return cls(tuple(range(0, step * prefix_count, step)), garbage, live)


class _Keys(Sequence[str]):
    """The bucket's keys in S3 order, computed from their index (a lazy sorted list)."""

    def __init__(self, shape: BucketShape) -> None:
        self._shape = shape
        self._dirs = [f"{ROOT}/{p:03d}/" for p in shape.prefixes]
        self._len = shape.total

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        shape = self._shape
        which, offset = divmod(index, shape.per_prefix)
        # Epochs 1..garbage are garbage, garbage+1..garbage+live are live.
        return f"{self._dirs[which]}{offset + 1:018d}/{_NAME}"


@dataclass
class SyntheticStore:
    """An `ObjectStore` over a `BucketShape` (see the module docstring)."""

    shape: BucketShape
    delay_s: float = 0.0
    last_modified_s: float = 1_000_000_000.0
    size: int = 4 * 1024 * 1024
    list_requests: int = 0
    delete_requests: int = 0
    deleted: int = 0
    own_cpu_s: float = 0.0
    _keys: _Keys = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._keys = _Keys(self.shape)

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        """One page of ListObjectsV2 (the continuation token is the last key)."""
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        started = time.process_time()
        self.list_requests += 1
        keys = self._keys
        after = continuation_token if continuation_token is not None else start_after
        start = bisect.bisect_left(keys, prefix)
        if after is not None:
            start = max(start, bisect.bisect_right(keys, after))
        end = min(start + max_keys, len(keys))
        page = []
        modified, size = self.last_modified_s, self.size
        for index in range(start, end):
            key = keys[index]
            if not key.startswith(prefix):
                break
            page.append(ObjectInfo(key, size, modified))
        else:
            index = end
        more = index < len(keys) and keys[index].startswith(prefix) and bool(page)
        result = ListPage(tuple(page), page[-1].key if more else None)
        self.own_cpu_s += time.process_time() - started
        return result

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """Count the keys as deleted (the listing is not changed)."""
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        started = time.process_time()
        self.delete_requests += 1
        self.deleted += len(keys)
        result = DeleteResult(tuple(keys))
        self.own_cpu_s += time.process_time() - started
        return result
