"""The executor seam: what a Spark job needs from a store that is not S3.

S3 keeps its own functions (`gcd.spark.listing`, `gcd.spark.delete`, `gcd.spark.nesting`
with boto3); another store's target (GCS: `gcd.spark.gcs.GcsStore`) is a plain,
picklable value with these methods, which the shared modules call where they would
call boto3. Each method runs in an executor task; `client` is what `client()` made in
that task (one per task, never shipped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

__all__ = ["ExecutorStore"]


class ExecutorStore(Protocol):
    """A bucket as executors reach it (list, delete, probe a claim)."""

    def client(self, *, pool: int = 10) -> Any:
        """A client for one task (thread-safe, `pool` connections)."""

    def list_prefix(self, client: Any, prefix: str, **options: Any) -> Iterator[Any]:
        """Source rows under `prefix` (options as `gcd.spark.listing.list_prefix`)."""

    def delete(self, client: Any, keys: list[str], *, pace: Callable[[int], None],
               on_request: Callable[[], None]) -> dict[str, str | None]:  # fmt: skip
        """Delete up to 1000 keys: key -> None when deleted, else the error text."""

    def exists(self, client: Any, key: str) -> bool:
        """True when object `key` exists (retried; StorageError when it cannot tell)."""
