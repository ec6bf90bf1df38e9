"""An in-memory versioned bucket: `VersionedMemoryStore` (tests and the simulation).

It answers as a versioned S3 bucket does where the sweeper looks: `detect` says
versioning is Enabled; `list_versions_page` gives every version and delete marker,
keys ascending and each key's entries newest first (a page ends at a key boundary, so
a key's entries never span pages: a deviation from S3 the sweeper does not rely on);
`delete_batch` takes targets (`gcd.rules.versions`): a key without a version id gets a
new delete marker (reported in `DeleteResult.markers`), a key with one loses exactly
that version or marker. Each version keeps its bytes, so a test can check that a
restored object is byte for byte what was written.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gcd.rules.versions import split_target, version_target
from gcd.storage.objectstore import DeleteResult, ListPage, ObjectInfo, StoreFeatures

__all__ = ["StoredVersion", "VersionedMemoryStore"]


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """One version or delete marker of a key."""

    version_id: str
    body: bytes | None
    """None for a delete marker."""
    last_modified_s: float


@dataclass
class VersionedMemoryStore:
    """A versioned bucket in memory (not thread-safe); `clock` stamps new versions."""

    clock: Callable[[], float]
    versions: dict[str, list[StoredVersion]] = field(default_factory=dict)
    """key -> versions and markers, oldest first."""
    list_requests: int = 0
    delete_requests: int = 0
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def _new_id(self) -> str:
        return f"v{next(self._ids):06d}"

    def put(self, key: str, body: bytes) -> str:
        """Write a new current version; its version id."""
        version = StoredVersion(self._new_id(), body, self.clock())
        self.versions.setdefault(key, []).append(version)
        return version.version_id

    def delete_marker(self, key: str) -> str:
        """Delete `key` without a version id, as a writer would: a new marker's id."""
        marker = StoredVersion(self._new_id(), None, self.clock())
        self.versions.setdefault(key, []).append(marker)
        return marker.version_id

    def current(self, key: str) -> bytes | None:
        """The bytes a GET of `key` returns now (None: no object, or a marker on top)."""
        found = self.versions.get(key)
        return None if not found else found[-1].body

    @property
    def detected(self) -> StoreFeatures:
        """Versioning Enabled."""
        return StoreFeatures(versioning="Enabled")

    async def detect(self) -> StoreFeatures:
        """Versioning Enabled."""
        return self.detected

    def _infos(self, key: str) -> list[ObjectInfo]:
        entries = self.versions.get(key, [])
        return [
            ObjectInfo(
                key,
                len(v.body or b""),
                v.last_modified_s,
                v.version_id,
                v.body is None,
                index == len(entries) - 1,
            )
            for index, v in reversed(list(enumerate(entries)))
        ]

    def _keys(self, prefix: str, after: str | None) -> list[str]:
        return sorted(
            key
            for key, entries in self.versions.items()
            if entries and key.startswith(prefix) and (after is None or key > after)
        )

    async def list_versions_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        """Every version and marker of the keys after the start, whole keys per page."""
        self.list_requests += 1
        after = continuation_token if continuation_token is not None else start_after
        page: list[ObjectInfo] = []
        keys = self._keys(prefix, after)
        for index, key in enumerate(keys):
            page += self._infos(key)
            if len(page) >= max_keys and index + 1 < len(keys):
                return ListPage(tuple(page), key)
        return ListPage(tuple(page), None)

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        """The current objects (no marker on top), as ListObjectsV2."""
        self.list_requests += 1
        after = continuation_token if continuation_token is not None else start_after
        keys = [key for key in self._keys(prefix, after) if self.versions[key][-1].body is not None]
        page = keys[:max_keys]
        infos = tuple(
            ObjectInfo(
                k, len(self.versions[k][-1].body or b""), self.versions[k][-1].last_modified_s
            )
            for k in page
        )
        return ListPage(infos, page[-1] if len(keys) > max_keys else None)

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """Targets deleted; a key without a version id gets a delete marker."""
        self.delete_requests += 1
        deleted: list[str] = []
        markers: list[tuple[str, str]] = []
        for target in keys:
            key, version_id = split_target(target)
            if version_id is None:
                markers.append((key, self.delete_marker(key)))
                deleted.append(key)
                continue
            entries = self.versions.get(key, [])
            self.versions[key] = [v for v in entries if v.version_id != version_id]
            if not self.versions[key]:
                del self.versions[key]
            deleted.append(version_target(key, version_id))
        return DeleteResult(tuple(deleted), (), tuple(markers))

    async def lock_state(self, key: str, version_id: str) -> tuple[str, float | None]:
        """No Object Lock here."""
        return "none", None

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        """The current bytes of `key` (the namespace claim), or None."""
        return self.current(key)

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        """Write `key` (with `if_absent`, only when no object is current)."""
        if if_absent and self.current(key) is not None:
            return False
        self.put(key, body)
        return True
