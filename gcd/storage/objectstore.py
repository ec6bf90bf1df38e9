"""The object-store interface the sweeper needs.

Design notes: docs/internals/storage.md, `gcd.storage.objectstore`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, runtime_checkable

from gcd.rules.triage import retryable_code
from gcd.rules.versions import split_target, version_target
from l0gc.errors import StorageError

__all__ = [
    "BucketStore",
    "DeleteResult",
    "DetectingStore",
    "KeyFailure",
    "ListOptions",
    "ListPage",
    "ObjectInfo",
    "ObjectStore",
    "SoftDeleteStore",
    "StoreFeatures",
    "VersionedStore",
    "check_batch",
    "small_object",
    "status_fault",
]


@dataclass(slots=True)
class ObjectInfo:
    """One listed object: key, size in bytes, LastModified as epoch seconds (UTC).

    Not frozen, though nothing changes one once listed: a frozen dataclass's constructor
    sets each field through `object.__setattr__`, ~0.5 us more for every listed key
    (bench/RESULTS.md section 41)."""

    key: str
    size: int
    last_modified_s: float
    version_id: str | None = None
    """Set by `list_versions_page` only: the version this entry is."""
    delete_marker: bool = False
    """True for a delete marker (`list_versions_page` only)."""
    is_latest: bool = False
    """True for the key's newest version or marker (`list_versions_page` only)."""
    generation: str | None = None
    """GCS: the object's generation, what a restore of it after a delete names."""


@dataclass(frozen=True, slots=True)
class ListPage:
    """One ListObjectsV2 answer; `next_token` is None on the last page."""

    objects: tuple[ObjectInfo, ...]
    next_token: str | None
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class KeyFailure:
    """A key DeleteObjects did not delete, with the service's code and message."""

    key: str
    code: str
    message: str

    @property
    def retryable(self) -> bool:
        """True when deleting this key again later may succeed."""
        return retryable_code(self.code)


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """One DeleteObjects answer: what went, and what did not."""

    deleted: tuple[str, ...]
    errors: tuple[KeyFailure, ...] = ()
    markers: tuple[tuple[str, str], ...] = ()
    """(key, version id of the delete marker the delete wrote) for each key deleted
    without a version id on a versioned bucket (the undo window's hidden keys)."""

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any], sent: Sequence[str] = ()) -> DeleteResult:
        """The result of an S3 DeleteObjects answer as boto3 and aiobotocore parse it.

        A failure without a code gets "Unknown", which is not retryable: a key is never
        taken for deleted unless the answer lists it as deleted. Entries are targets
        (`gcd.rules.versions`): the key and the answer's VersionId. A failure naming only
        the key of versions that were `sent` (moto does) is a failure of each of them
        the answer does not list as deleted.
        """
        asked = set(sent)
        deleted = tuple(_deleted_target(item, asked) for item in answer.get("Deleted", ()))
        errors: list[KeyFailure] = []
        for item in answer.get("Errors", ()):
            key, version_id = item.get("Key", ""), item.get("VersionId")
            code, message = str(item.get("Code", "Unknown")), str(item.get("Message", ""))
            named = [version_target(key, version_id)]
            if version_id is None and sent:
                gone = set(deleted)
                named = [t for t in sent if split_target(t)[0] == key and t not in gone] or named
            errors += [KeyFailure(target, code, message) for target in named]
        markers = tuple(
            (str(item["Key"]), str(item["DeleteMarkerVersionId"]))
            for item in answer.get("Deleted", ())
            if item.get("VersionId") is None
            and item.get("DeleteMarkerVersionId") is not None
            and version_target(str(item["Key"]), str(item["DeleteMarkerVersionId"])) not in asked
        )
        return cls(deleted, tuple(errors), markers)

    @classmethod
    def from_quiet_answer(
        cls, answer: Mapping[str, Any], sent: Sequence[str]
    ) -> DeleteResult | None:
        """The result of a DeleteObjects answer to a request with ``<Quiet>true</Quiet>``.

        A quiet answer lists failures only: every target `sent` that no error names was
        deleted. That silence is trusted only when it can be:

        - an answer listing any ``Deleted`` entry comes from a store that ignored Quiet:
          it is read as a verbose answer (`from_answer`: a key it does not mention is
          sent again, never taken for deleted);
        - every error must name a target sent (an error naming only the key of versions
          sent fails each of them). An error naming anything else (a store that rewrote
          the key: ``a//b`` read as ``a/b``) means the answer cannot say which target
          failed: None, and the caller must send the request again verbose.

        Quiet answers carry no ``DeleteMarkerVersionId``: a store sends Quiet only where no
        delete can write a marker (an unversioned bucket, or targets with version ids).
        """
        if answer.get("Deleted"):
            return cls.from_answer(answer, sent)
        errors = answer.get("Errors", ())
        if not errors:
            return cls(tuple(sent))
        asked = set(sent)
        by_key: dict[str, list[str]] = {}
        for target in sent:
            by_key.setdefault(split_target(target)[0], []).append(target)
        failures: dict[str, KeyFailure] = {}
        for item in errors:
            key, version_id = str(item.get("Key", "")), item.get("VersionId")
            code, message = str(item.get("Code", "Unknown")), str(item.get("Message", ""))
            if version_id is None:
                named = by_key.get(key, [])
            else:
                target = version_target(key, str(version_id))
                named = [target] if target in asked else []
            if not named:
                return None
            for one in named:
                failures.setdefault(one, KeyFailure(one, code, message))
        deleted = tuple(target for target in sent if target not in failures)
        return cls(deleted, tuple(failures.values()))


def _deleted_target(item: Mapping[str, Any], sent: set[str]) -> str:
    """The target a Deleted entry names. A delete marker deleted by its version id may be
    named by DeleteMarkerVersionId alone (SeaweedFS); a delete without a version id that
    created a marker names the new marker there, which is not what was sent: the key."""
    key, version_id = item["Key"], item.get("VersionId")
    if version_id is None and item.get("DeleteMarkerVersionId") is not None:
        marker = version_target(key, str(item["DeleteMarkerVersionId"]))
        if marker in sent:
            return marker
    return version_target(key, version_id)


class ListOptions(TypedDict, total=False):
    """`list_page`'s keyword arguments, for a store that wraps another and passes them on
    (``**options: Unpack[ListOptions]``) instead of restating the signature."""

    start_after: str | None
    continuation_token: str | None
    max_keys: int


class ObjectStore(Protocol):
    """One bucket of an S3-compatible store, reduced to what the sweeper does."""

    async def list_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        """One ListObjectsV2 page: up to `max_keys` keys starting with `prefix`, ascending.

        The page starts after `start_after`, or where `continuation_token` (the
        `ListPage.next_token` of the page before) says, which then wins; the listing
        goes on while `next_token` is not None.
        """
        ...

    async def delete_batch(self, keys: Sequence[str]) -> DeleteResult:
        """One DeleteObjects request for 1-1000 keys.

        Deleting a missing key succeeds. The answer says per key what happened
        (`gcd.rules.triage` sorts it); a failure of the whole request raises.
        """
        ...


class BucketStore(ObjectStore, Protocol):
    """What a backend opens (`gcd.storage.backend.Backend.open`): a sweeper store that is
    also a claim store, reading and writing the small objects l0gc keeps in the bucket
    (the namespace claim, journal segments). Other abilities are their own protocols,
    checked with isinstance: `DetectingStore`, `VersionedStore`, `SoftDeleteStore`."""

    async def get_object(self, key: str, *, max_bytes: int) -> bytes | None:
        """A small object's body, or None when absent."""
        ...

    async def put_object(self, key: str, body: bytes, *, if_absent: bool) -> bool:
        """Write a small object; with `if_absent`, False when the key already exists."""
        ...


@dataclass(frozen=True, slots=True)
class StoreFeatures:
    """What a store's preflight detected about the bucket (the round's JSON "store")."""

    versioning: str = "off"
    """"Enabled", "Suspended", "off" (never enabled) or "unknown" (not readable)."""
    object_lock: bool | None = False
    """True when Object Lock is enabled on the bucket; None: not readable."""
    ordered_listing: bool = True
    """False for a store that lists keys out of order and refuses StartAfter."""
    batch_delete: bool | None = True
    """False once DeleteObjects answered NotImplemented; None: not tried yet."""

    @property
    def versioned(self) -> bool:
        """True when deletes without a version id leave delete markers."""
        return self.versioning in {"Enabled", "Suspended"}

    def to_dict(self) -> dict[str, Any]:
        """The features as a JSON-ready dict."""
        return {
            "versioning": self.versioning,
            "object_lock": self.object_lock,
            "listing": "ordered" if self.ordered_listing else "unordered",
            "batch_delete": self.batch_delete,
        }


@runtime_checkable
class DetectingStore(Protocol):
    """A store that can say how it differs from plain S3 (`StoreFeatures`)."""

    async def detect(self) -> StoreFeatures:
        """The bucket's features (cached by the store for a bounded time)."""
        ...

    @property
    def detected(self) -> StoreFeatures:
        """The features known now, without a request (batch support learnt so far)."""
        ...


@runtime_checkable
class SoftDeleteStore(Protocol):
    """A store that keeps a deleted object restorable for a retention of its own (Azure
    blob soft delete, a GCS bucket's soft delete policy): the undo window's third rule."""

    async def soft_delete_retention(self) -> float | None:
        """Seconds a deleted object stays restorable (0: no soft delete); None when the
        setting cannot be read (then the undo window does not rely on it)."""
        ...

    async def undelete(self, key: str, generation: str | None) -> str:
        """Bring back the soft-deleted `key` (GCS: its `generation`): "restored"; "live"
        when an object is live under the name (nothing done: never overwritten); "gone"
        when there is nothing to bring back (the retention passed)."""
        ...


@runtime_checkable
class VersionedStore(Protocol):
    """A store that lists versions and deletes targets (`gcd.rules.versions`)."""

    async def list_versions_page(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        continuation_token: str | None = None,
        max_keys: int = 1000,
    ) -> ListPage:
        """One ListObjectVersions page, as `ObjectStore.list_page` (keys ascending, every
        version and delete marker of a key one `ObjectInfo`)."""
        ...

    async def lock_state(self, key: str, version_id: str) -> tuple[str, float | None]:
        """Why a version is locked ("legal hold", "retention GOVERNANCE"...) and its
        retain-until (epoch seconds) when it has one."""
        ...


def status_fault(code: str) -> StorageError:
    """The StorageError an S3 answer with this code becomes (`gcd.rules.triage` says
    whether it is retryable)."""
    return StorageError(f"injected {code}", code=code, retryable=retryable_code(code))


def small_object(data: bytes, max_bytes: int, where: str) -> bytes:
    """`data` read by `get_object`, or StorageError EntityTooLarge past `max_bytes`."""
    if len(data) > max_bytes:
        raise StorageError(
            f"{where} is larger than {max_bytes} bytes", code="EntityTooLarge", retryable=False
        )
    return data


def check_batch(keys: Sequence[str]) -> None:
    """StorageError InvalidRequest unless `delete_batch` was given 1-1000 keys."""
    if not 1 <= len(keys) <= 1000:
        raise StorageError(
            f"a delete batch takes 1-1000 keys, got {len(keys)}",
            code="InvalidRequest",
            retryable=False,
        )
