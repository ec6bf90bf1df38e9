"""The seam a store other than S3 plugs into the Spark pipeline through: `ExecutorStore`.

Design notes: docs/internals/spark.md, `gcd.storage.executor`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gcd.rules.backoff import Backoff
from gcd.storage.s3.executor import S3Target

if TYPE_CHECKING:
    from gcd.rules.layout import KeyLayout

__all__ = ["ExecutorStore", "Listed", "Target"]

Listed = tuple[str, int, float, str | None, bool, bool]
"""(key, size, last_modified_s, version_id, is_latest, delete_marker): one source row
(`gcd.spark.listing.Listed`)."""


@runtime_checkable
class ExecutorStore(Protocol):
    """A store as Spark executors reach it (module docstring)."""

    @property
    def bucket(self) -> str:
        """The bucket or container, for messages."""
        ...

    @property
    def backoff(self) -> Backoff:
        """The retry schedule of every call."""
        ...

    def client(self, *, pool: int) -> Any:
        """A thread-safe client for `pool` concurrent requests."""
        ...

    def list_prefix(
        self,
        client: Any,
        prefix: str,
        *,
        layout: KeyLayout | None,
        skip_above_epoch: int | None,
        on_request: Callable[[], None] | None,
    ) -> Iterator[Listed]:
        """Every object under `prefix`, skipping live prefix directories when asked."""
        ...

    def delete_keys(
        self,
        client: Any,
        keys: Sequence[str],
        *,
        pace: Callable[[int], None],
        on_request: Callable[[], None],
    ) -> dict[str, str | None]:
        """Delete up to 1000 keys; key -> None when deleted, else the final error."""
        ...

    def exists(self, client: Any, key: str) -> bool:
        """True when an object named `key` exists (a claim probe)."""
        ...


Target = S3Target | ExecutorStore
"""Where a Spark job's executors list, delete and probe."""
