"""Where a Google Cloud Storage bucket is and how to authenticate (no client imported
here: `gcd sweep` on S3 does not pay for it; `gcd.storage.gcs.client` is the client)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from l0gc.contract.binding import StorageTarget
from l0gc.errors import ConfigError

__all__ = ["GCS_ENDPOINT", "GCS_EXECUTOR_REQUIREMENTS", "GcsSettings"]

GCS_EXECUTOR_REQUIREMENTS = ("google-auth",)
"""What Spark executors need for this store besides the common ones (not for an
anonymous emulator; `gcd.spark.package.STORE_REQUIREMENTS`)."""

GCS_ENDPOINT = "https://storage.googleapis.com"
"""The JSON API's endpoint (listing, objects, `/batch/storage/v1`)."""
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
"""GCS bucket names: 3-222 lower-case letters, digits, '-', '_' and '.' (3-63 without dots)."""


@dataclass(frozen=True, slots=True)
class GcsSettings:
    """The bucket, the endpoint (an emulator's, or GCS's), and the credentials.

    Credentials: `credentials_file` (a service-account key or an ADC file), else
    Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, the gcloud ADC
    file, then the metadata server: GKE workload identity, GCE). `anonymous` sends no
    credentials at all (an emulator). One of `gcd.storage.registry.StoreSettings`."""

    kind: ClassVar[str] = "gcs"
    bucket: str
    endpoint_url: str | None = None
    credentials_file: str | None = None
    anonymous: bool = False
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not _BUCKET.fullmatch(self.bucket) or ".." in self.bucket:
            raise ConfigError(
                f"bucket {self.bucket!r} is not a GCS bucket name (3-63 lower-case letters, "
                "digits, '-', '_' and '.', starting and ending with a letter or digit); give "
                "--bucket NAME (no gs://)"
            )
        if self.endpoint_url is not None and not self.endpoint_url.startswith(
            ("https://", "http://")
        ):
            raise ConfigError(
                f"endpoint URL {self.endpoint_url!r} must start with https:// (or http:// "
                "for an emulator), e.g. --endpoint-url http://127.0.0.1:9023"
            )
        if self.anonymous and self.credentials_file is not None:
            raise ConfigError(
                "--gcs-anonymous sends no credentials: drop "
                "--gcs-credentials-file, or drop --gcs-anonymous"
            )

    def target(self, root: str) -> StorageTarget:
        """The bucket and `root` as a namespace binding and the deletion journal name them."""
        return StorageTarget(self.bucket, root, self.endpoint_url, kind=self.kind)

    @property
    def api_root(self) -> str:
        """The endpoint without a trailing '/' (GCS's when none is given)."""
        return (self.endpoint_url or GCS_ENDPOINT).rstrip("/")
