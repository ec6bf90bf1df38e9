"""A namespace bound to its storage, and the storage knowing it (pure, no I/O).

Design notes: docs/internals/kernel.md, `l0gc.contract.binding`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from l0gc import strictjson
from l0gc.errors import InvalidRecord

__all__ = [
    "BINDING_VERSION",
    "CLAIM_NAME",
    "Binding",
    "Claim",
    "StorageTarget",
    "ancestor_roots",
    "any_may_precede_claim",
    "check_ancestor_claims",
    "check_binding",
    "claim_key",
    "claimed_root",
    "covering_root",
    "directories_below",
    "may_precede_claim",
    "nested_root",
    "overlap_conflict",
]

BINDING_VERSION = 1
CLAIM_NAME = ".l0gc-claim.json"
_MAX_DOC_BYTES = 16 * 1024
_CLAIM_BYTES = CLAIM_NAME.encode()
_MAY_SORT_BEFORE_CLAIM = re.compile(r"/(?:[\x00-\x2e]|\Z)")
"""A path segment that may sort before CLAIM_NAME: empty, or starting with a byte <= '.'
(CLAIM_NAME starts with '.'); a key without one sorts after every claim of its directories."""
_MAX_TEXT = 1024


def claim_key(root: str) -> str:
    """The key of the claim object under `root` ("" is the bucket's top)."""
    return f"{root}/{CLAIM_NAME}" if root else CLAIM_NAME


def ancestor_roots(root: str) -> tuple[str, ...]:
    """Every proper ancestor of `root` at '/' boundaries, nearest first, ending with the
    bucket's top (""): the roots whose claim would contain `root`."""
    parts = root.split("/")
    return tuple("/".join(parts[:n]) for n in range(len(parts) - 1, -1, -1))


def claimed_root(key: str) -> str | None:
    """The root a claim object's key claims, or None when `key` is no claim object."""
    if key == CLAIM_NAME:
        return ""
    return key[: -len(CLAIM_NAME) - 1] if key.endswith("/" + CLAIM_NAME) else None


def nested_root(key: str, root: str) -> str | None:
    """The root claimed by `key` when it is a claim object strictly below `root`.

    Prefixes are compared at '/' boundaries: `a/data2` is not below `a/data`, `a/data/417` is.
    """
    claimed = claimed_root(key)
    return claimed if claimed is not None and claimed.startswith(root + "/") else None


def covering_root(key: str, root: str, nested: Collection[str]) -> str | None:
    """The root in `nested` that `key` (under `root`) lies in, or None."""
    if not nested:
        return None
    return next((d for d in directories_below(key, root) if d in nested), None)


def directories_below(key: str, root: str) -> Iterator[str]:
    """Every directory strictly below `root` that holds `key` (outermost first): where a
    nested claim could be when a listing is unordered and any key may come before it."""
    at = key.find("/", len(root) + 1)
    while at >= 0:
        yield key[:at]
        at = key.find("/", at + 1)


def may_precede_claim(key: str, root: str) -> Iterator[str]:
    """The directories strictly below `root` holding `key` whose claim object would sort
    AFTER `key` (byte order), so a listing may show `key` before that claim.

    Only a path segment that sorts before CLAIM_NAME (one starting with a byte below '.',
    or a prefix of the claim name) does; keys of digits and letters never do.
    """
    if _MAY_SORT_BEFORE_CLAIM.search(key, len(root) + 1) is None:
        return  # no segment below the root is empty or starts with a byte <= '.'
    for directory in directories_below(key, root):
        if key[len(directory) + 1 :].encode() < _CLAIM_BYTES:
            yield directory


def any_may_precede_claim(keys: Iterable[str]) -> bool:
    """False only when no key of `keys` has a path segment that may sort before CLAIM_NAME
    (so `may_precede_claim` yields nothing for any of them, whatever the root): one search
    of the keys joined, where a root's own segments or a joining line feed can only make
    it say True more often."""
    return _MAY_SORT_BEFORE_CLAIM.search("\n".join(keys)) is not None


def _normal_endpoint(endpoint_url: str | None) -> str | None:
    if endpoint_url is None:
        return None
    text = endpoint_url.strip().rstrip("/")
    scheme, sep, rest = text.partition("://")
    return f"{scheme.lower()}{sep}{rest.lower()}" if sep else text.lower()


TARGET_KINDS = frozenset({"s3", "azure", "gcs"})
"""What a binding may point at: an S3 bucket, an Azure Blob container or a GCS bucket."""


@dataclass(frozen=True, slots=True)
class StorageTarget:
    """Where a namespace's objects live: an S3 bucket (or, kind "azure", an Azure container
    at its account URL; kind "gcs", a GCS bucket), a root, and (optionally) an endpoint."""

    bucket: str
    root: str
    endpoint_url: str | None = None
    kind: str = "s3"

    def __post_init__(self) -> None:
        object.__setattr__(self, "endpoint_url", _normal_endpoint(self.endpoint_url))

    def describe(self) -> str:
        """``s3://bucket/root`` plus the endpoint when there is one."""
        where = f"{self.kind}://{self.bucket}/{self.root}"
        return where if self.endpoint_url is None else f"{where} at {self.endpoint_url}"

    def bind_command(self) -> str:
        """The command that binds a namespace to this target (the namespace flags aside)."""
        if self.kind == "azure":
            return (
                f"watermark namespace bind --storage azure --account-url {self.endpoint_url} "
                f"--container {self.bucket} --root {self.root}"
            )
        endpoint = "" if self.endpoint_url is None else f" --endpoint-url {self.endpoint_url}"
        if self.kind == "gcs":
            return (
                f"watermark namespace bind --storage gcs --bucket {self.bucket} "
                f"--root {self.root}{endpoint}"
            )
        return f"watermark namespace bind --bucket {self.bucket} --root {self.root}{endpoint}"

    def to_doc(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "kind": self.kind,
            "bucket": self.bucket,
            "root": self.root,
            "endpoint_url": self.endpoint_url,
        }


@dataclass(frozen=True, slots=True)
class Binding:
    """`{ns}/binding`: the one storage target this namespace's watermark is about."""

    namespace: str
    target: StorageTarget
    binding_id: str
    cluster_id: str
    bound_at: float

    def encode(self) -> bytes:
        """Compact JSON."""
        return _dump(self, target=self.target.to_doc(), bound_at=self.bound_at)

    @classmethod
    def decode(cls, raw: bytes) -> Binding:
        """Parse a stored binding; InvalidRecord says what is wrong."""
        what = "namespace binding"
        doc = _load(raw, what)
        target = doc.get("target")
        if not isinstance(target, dict):
            raise InvalidRecord(f"{what}: field 'target' must be an object")
        kind = target.get("kind")
        if kind not in TARGET_KINDS:
            raise InvalidRecord(f"{what}: unknown target kind {kind!r}")
        endpoint = target.get("endpoint_url")
        return cls(
            namespace=_text(doc, "namespace", what),
            target=StorageTarget(
                bucket=_text(target, "bucket", what),
                root=_text(target, "root", what),
                endpoint_url=None if endpoint is None else _text(target, "endpoint_url", what),
                kind=str(kind),
            ),
            binding_id=_text(doc, "binding_id", what),
            cluster_id=_text(doc, "etcd_cluster_id", what),
            bound_at=_number(doc, "bound_at", what),
        )

    def claim(self) -> Claim:
        """The claim object that goes with this binding."""
        return Claim(
            self.namespace,
            self.binding_id,
            self.cluster_id,
            self.target.bucket,
            self.target.root,
            self.bound_at,
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """`{root}/.l0gc-claim.json` in the bucket: which namespace may sweep this root."""

    namespace: str
    binding_id: str
    cluster_id: str
    bucket: str
    root: str
    claimed_at: float

    def encode(self) -> bytes:
        """Compact JSON."""
        return _dump(self, bucket=self.bucket, root=self.root, claimed_at=self.claimed_at)

    @classmethod
    def decode(cls, raw: bytes) -> Claim:
        """Parse a claim object; InvalidRecord says what is wrong."""
        what = "bucket claim"
        doc = _load(raw, what)
        return cls(
            namespace=_text(doc, "namespace", what),
            binding_id=_text(doc, "binding_id", what),
            cluster_id=_text(doc, "etcd_cluster_id", what),
            bucket=_text(doc, "bucket", what),
            root=_text(doc, "root", what),
            claimed_at=_number(doc, "claimed_at", what),
        )

    def describe(self) -> str:
        """Who holds the claim, for messages."""
        return (
            f"namespace {self.namespace!r} (binding {self.binding_id}, etcd cluster "
            f"{self.cluster_id})"
        )


def check_binding(
    namespace: str,
    binding_raw: bytes | None,
    cluster_id: str | None,
    target: StorageTarget,
    claim_raw: bytes | None,
) -> str | None:
    """Why a sweeper of `namespace` pointed at `target` must not delete; None when it may.

    `cluster_id` is the id of the etcd cluster the binding was read from (None when the
    client cannot tell); `claim_raw` is the claim object read from `target` (None: absent).
    """
    fix = "see docs/operations.md#binding-a-namespace"
    if binding_raw is None:
        return (
            f"namespace {namespace} is not bound to any storage, so its watermark may not "
            f"be used on {target.describe()}; if that is its storage, bind it with "
            f"`{target.bind_command()}` ({fix})"
        )
    try:
        binding = Binding.decode(binding_raw)
    except InvalidRecord as exc:
        return f"namespace {namespace}: unreadable binding ({exc}); {fix}"
    if binding.namespace != namespace:
        return (
            f"the binding stored in namespace {namespace} names namespace "
            f"{binding.namespace!r} (copied keys?); {fix}"
        )
    if binding.target != target:
        return (
            f"namespace {namespace} is bound to {binding.target.describe()}, but this sweeper "
            f"is pointed at {target.describe()}: fix --bucket/--root/--endpoint-url or "
            "--namespace"
        )
    if cluster_id is not None and binding.cluster_id != cluster_id:
        return (
            f"namespace {namespace} was bound in etcd cluster {binding.cluster_id}, but this "
            f"is etcd cluster {cluster_id} (a restored backup or copied keys?): check the "
            f"watermarks, then re-bind with `watermark namespace bind --replace` ({fix})"
        )
    if claim_raw is None:
        return (
            f"{target.describe()} has no claim object {claim_key(target.root)} for namespace "
            f"{namespace} (deleted, or another bucket of the same name?): re-bind with "
            f"`watermark namespace bind` ({fix})"
        )
    try:
        claim = Claim.decode(claim_raw)
    except InvalidRecord as exc:
        return f"{target.describe()}: unreadable claim {claim_key(target.root)} ({exc}); {fix}"
    if (claim.namespace, claim.binding_id) != (namespace, binding.binding_id):
        return (
            f"{target.describe()} is claimed by {claim.describe()}, but this sweeper's "
            f"namespace is {namespace} (binding {binding.binding_id}, etcd cluster "
            f"{binding.cluster_id}): two namespaces must not share a root"
        )
    return None


def overlap_conflict(
    namespace: str, target: StorageTarget, other_root: str, claim_raw: bytes, *, inside: bool
) -> str:
    """The refusal for `target` (of `namespace`) nesting with the claimed `other_root`:
    `inside` when `target.root` lies inside it, else it lies inside `target.root`."""
    other = StorageTarget(target.bucket, other_root, target.endpoint_url, target.kind)
    try:
        owner = Claim.decode(claim_raw).describe()
    except InvalidRecord as exc:
        owner = f"an unreadable claim ({exc})"
    where = (
        f"inside {other.describe()}, claimed by {owner}"
        if inside
        else f"contains {other.describe()}, claimed by {owner}"
    )
    return (
        f"namespace {namespace}'s root {target.describe()} {where} ({claim_key(other_root)}): "
        "the roots of two namespaces must not nest, or one namespace's sweeper would delete "
        "the other's live objects; bind one of them to a root outside the other's (see "
        "docs/operations.md#roots-never-nest)"
    )


def check_ancestor_claims(
    namespace: str, cluster_id: str | None, target: StorageTarget, found: Mapping[str, bytes]
) -> str | None:
    """Why `target` must not be swept given the claims `found` at its ancestors (root ->
    claim object, `ancestor_roots`), or None. A claim of this same namespace in this same
    etcd cluster (left by a `--replace` move) is no conflict; any other is, an unreadable
    one included."""
    for root in ancestor_roots(target.root):
        raw = found.get(root)
        if raw is None:
            continue
        try:
            claim = Claim.decode(raw)
        except InvalidRecord:
            return overlap_conflict(namespace, target, root, raw, inside=True)
        if claim.namespace != namespace or (
            cluster_id is not None and claim.cluster_id != cluster_id
        ):
            return overlap_conflict(namespace, target, root, raw, inside=True)
    return None


def _dump(record: Binding | Claim, **fields: Any) -> bytes:
    """`record`'s namespace, binding id and etcd cluster id, and `fields`, at
    BINDING_VERSION: compact JSON, keys sorted."""
    doc = {
        "version": BINDING_VERSION,
        "namespace": record.namespace,
        "binding_id": record.binding_id,
        "etcd_cluster_id": record.cluster_id,
        **fields,
    }
    return strictjson.dumps(doc, what="binding", sort_keys=True, compact=True).encode()


def _load(raw: bytes, what: str) -> dict[str, Any]:
    doc = strictjson.loads(raw, what=what, max_bytes=_MAX_DOC_BYTES, max_depth=4)
    if not isinstance(doc, dict):
        raise InvalidRecord(f"{what} must be a JSON object")
    if type(doc.get("version")) is not int or doc["version"] != BINDING_VERSION:
        raise InvalidRecord(f"{what}: unsupported version {doc.get('version')!r}")
    return doc


def _text(doc: dict[str, Any], name: str, what: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not value or len(value) > _MAX_TEXT:
        raise InvalidRecord(f"{what}: field {name!r} must be a non-empty string, got {value!r}")
    return value


def _number(doc: dict[str, Any], name: str, what: str) -> float:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRecord(f"{what}: field {name!r} must be a finite number, got {value!r}")
    return float(value)
