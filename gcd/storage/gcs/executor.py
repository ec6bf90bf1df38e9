"""Google Cloud Storage on Spark executors: the target, a sync JSON API client, retries.

Design notes: docs/internals/spark.md, `gcd.storage.gcs.executor`.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gcd.rules.backoff import Backoff
from gcd.storage.gcs.settings import GCS_ENDPOINT, GcsSettings
from gcd.storage.gcs.wire import MAX_BATCH, batch_body, error_code, parse_answer
from gcd.storage.gcs.wire import triage as match_answers
from gcd.storage.objectstore import DeleteResult
from l0gc.errors import StorageError

__all__ = ["SCOPE", "GcsClient", "GcsTarget", "ListedObject"]


T = TypeVar("T")
SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
"""The daemon's scope (`gcd.storage.gcs.client.SCOPE`, which executors cannot import)."""
_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_FIELDS = "items(name,size,updated,generation),nextPageToken"

ListedObject = tuple[str, int, float]
"""(name, size, updated as epoch seconds) of one listed object."""


@dataclass(frozen=True, slots=True)
class GcsTarget:
    """The bucket and how executors reach it: plain values, shipped in task closures."""

    bucket: str
    api_root: str = GCS_ENDPOINT
    credentials_file: str | None = None
    """A key / ADC file's PATH on the executors (never its content); None: ADC."""
    anonymous: bool = False
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    backoff: Backoff = field(default_factory=lambda: Backoff(base_s=0.2, cap_s=10.0))

    @classmethod
    def of(cls, settings: GcsSettings) -> GcsTarget:
        """The executors' view of the daemon's settings (validated there)."""
        return cls(
            settings.bucket,
            settings.api_root,
            settings.credentials_file,
            settings.anonymous,
            settings.connect_timeout_s,
            settings.read_timeout_s,
        )

    @property
    def url(self) -> str:
        """``gs://bucket`` for messages."""
        return f"gs://{self.bucket}"

    def client(self, *, pool: int = 10) -> GcsClient:
        """A client for one task (thread-safe; `pool` connections)."""
        return GcsClient(self, pool=pool)


def _credentials(target: GcsTarget) -> Any:
    """google-auth credentials from the key file or ADC; StorageError NoCredentials
    naming where they were looked for (never their content)."""
    try:
        import google.auth  # noqa: PLC0415 - only with credentials
        from google.auth import exceptions  # noqa: PLC0415
    except ImportError as exc:
        raise StorageError(
            "google-auth is not installed on this executor: install it (pip install "
            "google-auth) or use an anonymous emulator",
            code="NoCredentials",
            retryable=False,
        ) from exc
    where = (
        f"the key file {target.credentials_file!r}"
        if target.credentials_file
        else "Application Default Credentials"
    )
    try:
        if target.credentials_file:
            found = _from_file(target.credentials_file)
        else:
            found, _ = google.auth.default(scopes=[SCOPE])
    except (exceptions.GoogleAuthError, OSError, ValueError) as exc:
        raise StorageError(
            f"no Google credentials on the executor from {where} ({type(exc).__name__})",
            code="NoCredentials",
            retryable=False,
        ) from None
    return found


def _from_file(path: str) -> Any:
    """Credentials of a service-account key or an ADC (authorized user) file, by the
    loader of its own type (google-auth's generic loader accepts any configuration)."""
    from google.oauth2 import credentials, service_account  # noqa: PLC0415

    with open(path, encoding="utf-8") as handle:
        kind = json.load(handle).get("type")
    if kind == "service_account":
        return service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
            path, scopes=[SCOPE]
        )
    if kind == "authorized_user":
        return credentials.Credentials.from_authorized_user_file(  # type: ignore[no-untyped-call]
            path, scopes=[SCOPE]
        )
    raise ValueError(
        f"credentials of type {kind!r}: give a service-account key or an ADC "
        "file, or set GOOGLE_APPLICATION_CREDENTIALS for other configurations"
    )


class GcsClient:
    """The JSON API calls executors make, over one urllib3 pool."""

    def __init__(self, target: GcsTarget, *, pool: int = 10) -> None:
        import urllib3  # noqa: PLC0415 - executor-side dependency (boto3's)

        self.target = target
        self._http = urllib3.PoolManager(
            maxsize=max(1, pool),
            retries=False,
            timeout=urllib3.Timeout(connect=target.connect_timeout_s, read=target.read_timeout_s),
        )
        self._credentials = None if target.anonymous else _credentials(target)
        self._lock = threading.Lock()

    def _headers(self, operation: str) -> dict[str, str]:
        if self._credentials is None:
            return {}
        with self._lock:
            if not self._credentials.valid:
                from google.auth import exceptions  # noqa: PLC0415
                from google.auth.transport.urllib3 import Request  # noqa: PLC0415

                try:
                    self._credentials.refresh(Request(self._http))  # type: ignore[no-untyped-call]
                except exceptions.TransportError as exc:
                    raise StorageError(
                        f"{operation}: getting an access token failed ({type(exc).__name__})",
                        code="ConnectionError",
                        retryable=True,
                    ) from None
                except exceptions.GoogleAuthError as exc:
                    raise StorageError(
                        f"{operation}: no Google credentials ({type(exc).__name__})",
                        code="NoCredentials",
                        retryable=False,
                    ) from None
            return {"Authorization": f"Bearer {self._credentials.token}"}

    def send(
        self,
        method: str,
        path: str,
        operation: str,
        *,
        params: dict[str, str] | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes, str]:
        """One request to `path` under the API root: (status, body, Content-Type)."""
        import urllib3  # noqa: PLC0415

        url = self.target.api_root.rstrip("/") + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        all_headers = {**self._headers(operation), **(headers or {})}
        try:
            answer = self._http.request(
                method, url, body=body, headers=all_headers, preload_content=True, redirect=False
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise StorageError(
                f"{operation} could not reach {self.target.api_root}: {type(exc).__name__}",
                code="ConnectionError",
                retryable=True,
            ) from exc
        return answer.status, answer.data, answer.headers.get("Content-Type", "")

    def failure(
        self, operation: str, status: int, body: bytes, *, listing: bool = False
    ) -> StorageError:
        """The StorageError of a failed call, coded as the daemon codes it."""
        code, message = error_code(status, body.decode("utf-8", "replace"))
        if listing and status == 404:  # a listing answers 404 only for a missing bucket
            code = "NoSuchBucket"
        return StorageError(
            f"{operation} failed: {message}", code=code, retryable=status in _RETRYABLE_STATUS
        )

    def list_page(
        self, prefix: str, *, after: str | None, page_token: str | None, max_keys: int = 1000
    ) -> tuple[list[ListedObject], str | None]:
        """One objects.list page under `prefix`, keys after `after` only, in key order;
        and the next page token (None on the last page)."""
        params = {"prefix": prefix, "maxResults": str(max_keys), "fields": _FIELDS}
        if after is not None:
            params["startOffset"] = after  # inclusive, and maybe ignored: filtered below
        if page_token is not None:
            params["pageToken"] = page_token
        operation = f"objects.list {self.target.url}/{prefix}"
        status, body, _ = self.send(
            "GET", f"/storage/v1/b/{self.target.bucket}/o", operation, params=params
        )
        if status != 200:
            raise self.failure(operation, status, body, listing=True)
        try:
            doc = json.loads(body)
            rows = [
                (str(item["name"]), int(item.get("size", 0)), _seconds(str(item["updated"])))
                for item in doc.get("items", ())
                if str(item["name"]).startswith(prefix) and (after is None or item["name"] > after)
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageError(
                f"{operation}: unreadable answer ({type(exc).__name__})", code="500", retryable=True
            ) from exc
        rows.sort(key=lambda row: row[0])  # code point order is UTF-8 byte order
        token = doc.get("nextPageToken")
        return rows, str(token) if token else None

    def delete_batch(self, keys: list[str]) -> DeleteResult:
        """One JSON batch deleting up to 100 keys, answers matched by Content-ID."""
        if not 1 <= len(keys) <= MAX_BATCH:
            raise ValueError(f"a GCS batch takes 1-{MAX_BATCH} keys, got {len(keys)}")
        operation = f"batch delete on {self.target.url}"
        body, content_type = batch_body(self.target.bucket, keys)
        status, answer, answer_type = self.send(
            "POST",
            "/batch/storage/v1",
            operation,
            body=body,
            headers={"Content-Type": content_type},
        )
        if status != 200:
            raise self.failure(operation, status, answer)
        try:
            return match_answers(keys, parse_answer(answer, answer_type))
        except ValueError as exc:
            raise StorageError(
                f"{operation}: unreadable answer ({exc})", code="500", retryable=True
            ) from exc

    def exists(self, key: str) -> bool:
        """objects.get of `key`'s metadata: True (200) or False (404)."""
        operation = f"objects.get {self.target.url}/{key}"
        path = f"/storage/v1/b/{self.target.bucket}/o/{urllib.parse.quote(key, safe='')}"
        status, body, _ = self.send("GET", path, operation, params={"fields": "name"})
        if status == 404:
            return False
        if status != 200:
            raise self.failure(operation, status, body)
        return True

    def upload(self, key: str, body: bytes) -> None:
        """objects.insert of `body` as `key` (a media upload)."""
        operation = f"objects.insert {self.target.url}/{key}"
        status, answer, _ = self.send(
            "POST",
            f"/upload/storage/v1/b/{self.target.bucket}/o",
            operation,
            params={"uploadType": "media", "name": key},
            body=body,
            headers={"Content-Type": "application/octet-stream"},
        )
        if status != 200:
            raise self.failure(operation, status, answer)


def _seconds(stamp: str) -> float:
    """An RFC 3339 time (``2026-11-22T10:00:00.123Z``) as epoch seconds."""
    from datetime import datetime  # noqa: PLC0415

    return datetime.fromisoformat(stamp).timestamp()
