"""The Python writer's fence: ``async with publisher.fence(p, epoch) as f: f.commit(n)``.

What an embedding writer holds between fencing an epoch and committing its log offset:
`Fence` (the granted `FenceToken`, `commit`, `abort`, `expires_in_s`) and `FenceBlock`,
the ``async with`` that acquires on entry and aborts on exit unless committed, so an
exception between upload and log append never leaves a fence held until its deadline.
The rules (what a commit raises, what abort answers) are `Publisher`'s
(`watermark.service.publisher`), which this only calls through `FenceHolder`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from watermark.service.guard import FenceToken, HoldingBlock

__all__ = ["Fence", "FenceBlock", "FenceHolder"]


class FenceHolder(Protocol):
    """What grants, commits and aborts fences: `watermark.service.publisher.Publisher`."""

    clock: Callable[[], float]

    async def acquire(self, partition: str, epoch: int, timeout_s: float | None) -> FenceToken:
        """Grant a fence of `epoch` on `partition` (waiting at most `timeout_s`)."""
        ...

    def commit(self, token: FenceToken, offset: int, objects: Sequence[object] = ()) -> bool:
        """Commit the fence at the log's `offset`, naming `objects`; True on a repeat."""
        ...

    def abort(self, token: FenceToken) -> bool:
        """Release the fence without committing; False if it was no longer held."""
        ...


@dataclass(frozen=True, slots=True)
class Fence:
    """A granted fence of the Python API: commit the write's log offset inside the block."""

    publisher: FenceHolder
    token: FenceToken
    """Its `epoch` and the `window` right after it was granted."""

    def commit(self, offset: int, objects: Sequence[str] = ()) -> bool:
        """Apply (offset, epoch) to the partition's GC state and release the fence; True
        when it was already committed at this offset (a repeat changes nothing).
        `objects`: the keys the entry references (docs/references.md). See
        `Publisher.commit` for what it raises."""
        return self.publisher.commit(self.token, offset, objects)

    def abort(self) -> bool:
        """Release the fence without committing (an upload you will not commit, e.g. the
        log append failed; its object is garbage). As HTTP ``abort``: False if the fence
        was no longer held (committed, aborted, reclaimed, or the partition was let go)."""
        return self.publisher.abort(self.token)

    @property
    def expires_in_s(self) -> float | None:
        """Seconds left before the hold deadline, on the publisher's clock (0.0 once it
        has passed: the fence may be reclaimed, do not append); None: no deadline."""
        deadline = self.token.deadline
        if deadline is None:
            return None
        return max(0.0, deadline - self.publisher.clock())


class FenceBlock(HoldingBlock):
    """``async with publisher.fence(...)``: acquire on entry, abort (if not committed) on exit."""

    __slots__ = ("_epoch", "_partition", "_publisher", "_timeout_s")

    def __init__(
        self, publisher: FenceHolder, partition: str, epoch: int, timeout_s: float | None
    ) -> None:
        super().__init__(publisher.abort)
        self._publisher = publisher
        self._partition = partition
        self._epoch = epoch
        self._timeout_s = timeout_s

    async def __aenter__(self) -> Fence:
        token = await self._publisher.acquire(self._partition, self._epoch, self._timeout_s)
        self._token = token
        return Fence(self._publisher, token)
