"""GCS as a Spark executor store: the `gcd.storage.executor.ExecutorStore` the shared stages call.

`GcsStore` is what `JobConfig.executor_target` holds for `--storage gcs`: a plain value
(the `GcsTarget`: bucket, endpoint, key file path, timeouts) shipped in task closures,
whose methods run in the executor tasks and call the GCS modules: listing
(`gcd.storage.gcs.executor_listing`), deletes (`gcd.storage.gcs.executor_delete`) and claim probes
(`gcd.storage.gcs.executor.GcsClient.exists`). Inventories are read on the driver's Spark
plan (`gcd.storage.gcs.inventory`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gcd.rules.backoff import Backoff
from gcd.storage.gcs.executor import GcsClient, GcsTarget
from gcd.storage.gcs.executor_delete import delete_keys
from gcd.storage.gcs.executor_listing import list_prefix
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.sync_retry import retry

if TYPE_CHECKING:
    from gcd.rules.layout import KeyLayout
    from gcd.storage.executor import Listed

__all__ = ["GcsStore"]


@dataclass(frozen=True, slots=True)
class GcsStore:
    """One GCS bucket as the executors reach it."""

    target: GcsTarget

    @classmethod
    def of(cls, settings: GcsSettings) -> GcsStore:
        """From the daemon's settings (`gcd.cli.storage.gcs_settings`)."""
        return cls(GcsTarget.of(settings))

    @property
    def bucket(self) -> str:
        """The bucket, for messages."""
        return self.target.bucket

    @property
    def backoff(self) -> Backoff:
        """The retry schedule of every call."""
        return self.target.backoff

    def client(self, *, pool: int = 10) -> GcsClient:
        """A client for one task."""
        return self.target.client(pool=pool)

    def list_prefix(
        self,
        client: Any,
        prefix: str,
        *,
        layout: KeyLayout | None = None,
        skip_above_epoch: int | None = None,
        on_request: Callable[[], None] | None = None,
    ) -> Iterator[Listed]:
        """Source rows under `prefix` (`gcd.storage.gcs.executor_listing.list_prefix`)."""
        return list_prefix(
            client, prefix, layout=layout, skip_above_epoch=skip_above_epoch, on_request=on_request
        )

    def delete_keys(
        self,
        client: Any,
        keys: Sequence[str],
        *,
        pace: Callable[[int], None],
        on_request: Callable[[], None],
    ) -> dict[str, str | None]:
        """Delete up to 1000 keys in JSON batches of 100 (`gcd.storage.gcs.executor_delete`)."""
        return delete_keys(client, list(keys), pace=pace, on_request=on_request)

    def exists(self, client: Any, key: str) -> bool:
        """True when object `key` exists (a claim probe), retried."""
        return bool(retry(lambda: client.exists(key), backoff=self.target.backoff))
