"""Naming an S3 bucket (or one of an S3-compatible server) and how to talk to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from l0gc.contract.binding import StorageTarget
from l0gc.errors import ConfigError

__all__ = ["S3Settings"]


@dataclass(frozen=True, slots=True)
class S3Settings:
    """Where the bucket is and how to talk to it (one of `gcd.storage.registry.StoreSettings`)."""

    kind: ClassVar[str] = "s3"
    bucket: str
    endpoint_url: str | None = None
    region: str | None = None
    max_pool_connections: int = 16
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0

    def target(self, root: str) -> StorageTarget:
        """The bucket and `root` as a namespace binding and the deletion journal name them."""
        return StorageTarget(self.bucket, root, self.endpoint_url)

    def __post_init__(self) -> None:
        if not self.bucket or self.bucket != self.bucket.strip() or "/" in self.bucket:
            msg = f"bucket {self.bucket!r} is not a bucket name; give --bucket NAME (no s3://)"
            raise ConfigError(msg)
        endpoint = self.endpoint_url
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ConfigError(
                f"endpoint URL {endpoint!r} must start with http:// or https://, "
                "e.g. --endpoint-url http://127.0.0.1:9000"
            )
        if self.max_pool_connections < 1:
            raise ConfigError(f"max_pool_connections {self.max_pool_connections!r} must be >= 1")
