"""An in-memory bucket for unit tests and the simulation: `MemoryObjectStore`.

It implements `gcd.storage.objectstore.ObjectStore`, counts requests and has fault
hooks: fail whole requests with a code (SlowDown, 500...) for a number of calls or a
seeded share of them, and fail chosen keys inside a delete.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gcd.storage.objectstore import DeleteResult, KeyFailure, ListPage, ObjectInfo, status_fault
from l0gc.errors import StorageError

__all__ = ["MemoryObjectStore", "RequestFault"]

RequestFault = Callable[[str], StorageError | None]
"""Fault hook: given the operation ("list" or "delete"), an error to raise, or None."""


@dataclass
class MemoryObjectStore:
    """An in-memory bucket with request counters and fault injection (not thread-safe)."""

    objects: dict[str, ObjectInfo] = field(default_factory=dict)
    list_requests: int = 0
    delete_requests: int = 0
    request_fault: RequestFault | None = None
    key_faults: dict[str, str] = field(default_factory=dict)
    """key -> S3 code returned for it by every delete, until removed from the dict."""
    key_fault_budget: dict[str, int] = field(default_factory=dict)
    """key -> how many more deletes fail with its `key_faults` code (absent: forever)."""
    bodies: dict[str, bytes] = field(default_factory=dict)
    """Bodies of objects written with `put_object` (listed objects have none)."""
    clock: Callable[[], float] | None = None
    """The LastModified of objects written with `put_object` (None: 0.0)."""

    _sorted: list[str] = field(default_factory=list, repr=False)
    _dirty: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self._dirty = bool(self.objects)

    def put(self, key: str, *, size: int = 1, last_modified_s: float = 0.0) -> None:
        """Create or overwrite one object."""
        if key not in self.objects and not self._dirty:
            bisect.insort(self._sorted, key)
        self.objects[key] = ObjectInfo(key, size, last_modified_s)

    def put_many(self, infos: Iterable[ObjectInfo]) -> None:
        """Create or overwrite many objects."""
        for info in infos:
            self.objects[info.key] = info
        self._dirty = True

    def keys(self) -> set[str]:
        """Every key currently stored."""
        return set(self.objects)

    def fail_requests(self, op: str, code: str, times: int) -> None:
        """Make the next `times` requests of `op` ("list"/"delete"/"any") fail with `code`."""
        remaining = [times]

        def hook(request_op: str) -> StorageError | None:
            if remaining[0] > 0 and op in {request_op, "any"}:
                remaining[0] -= 1
                return status_fault(code)
            return None

        self.request_fault = hook

    def fail_share(self, share: float, codes: Sequence[str], seed: int = 0) -> None:
        """Fail a seeded random `share` of all requests with one of `codes`."""
        rng = random.Random(seed)

        def hook(_op: str) -> StorageError | None:
            return status_fault(rng.choice(codes)) if rng.random() < share else None

        self.request_fault = hook

    def _check_fault(self, op: str) -> None:
        if self.request_fault is not None:
            error = self.request_fault(op)
            if error is not None:
                raise error

    def _sorted_keys(self) -> list[str]:
        if self._dirty or len(self._sorted) != len(self.objects):
            self._sorted = sorted(self.objects)
            self._dirty = False
        return self._sorted

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        """One page, as S3 would answer it; the continuation token is the last key."""
        self.list_requests += 1
        self._check_fault("list")
        keys = self._sorted_keys()
        after = continuation_token if continuation_token is not None else start_after
        start = max(
            bisect.bisect_left(keys, prefix),
            bisect.bisect_right(keys, after) if after is not None else 0,
        )
        page: list[ObjectInfo] = []
        index = start
        while index < len(keys) and len(page) < max_keys:
            key = keys[index]
            if not key.startswith(prefix):
                break
            page.append(self.objects[key])
            index += 1
        more = index < len(keys) and keys[index].startswith(prefix)
        token = page[-1].key if more and page else None
        return ListPage(tuple(page), token, request_id=f"mem-{self.list_requests}")

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """Delete keys; keys in `key_faults` fail with their code instead."""
        if not 1 <= len(keys) <= 1000:
            raise StorageError(
                f"DeleteObjects takes 1-1000 keys, got {len(keys)}",
                code="MalformedXML",
                retryable=False,
            )
        self.delete_requests += 1
        self._check_fault("delete")
        deleted: list[str] = []
        errors: list[KeyFailure] = []
        for key in keys:
            code = self.key_faults.get(key)
            if code is not None:
                budget = self.key_fault_budget.get(key)
                if budget is not None:
                    if budget <= 1:
                        del self.key_faults[key]
                        del self.key_fault_budget[key]
                    else:
                        self.key_fault_budget[key] = budget - 1
                errors.append(KeyFailure(key, code, f"injected {code}"))
                continue
            if self.objects.pop(key, None) is not None and not self._dirty:
                index = bisect.bisect_left(self._sorted, key)
                del self._sorted[index]
            deleted.append(key)
        return DeleteResult(tuple(deleted), tuple(errors))

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        """The body written by `put_object`, or None."""
        if key not in self.objects:
            return None
        return self.bodies.get(key, b"")[: max_bytes + 1]

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        """Write an object; with `if_absent`, only if the key is new (else False)."""
        if if_absent and key in self.objects:
            return False
        self.put(key, size=len(body), last_modified_s=self.clock() if self.clock else 0.0)
        self.bodies[key] = body
        return True
