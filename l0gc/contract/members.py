"""Replica members, their claims, and the rendezvous assignment: the fleet's etcd records.

A replica of `watermark serve --replicated` announces a `MemberRecord` under its lease and
claims each partition it owns with a `ClaimRecord`; partition ``p`` belongs to the live
member that lists it with the highest `weight` (rendezvous hashing). Both sides read them:
the replicas (`watermark.core.assignment` decides what to do) and `gcd status`'s fleet
view. Records are hostile input: parsed strictly, every field checked.
docs/architecture.md, "Replicated publishers", explains the scheme.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from l0gc import strictjson
from l0gc.contract.namespace import MAX_PARTITION_NAME, expand_partitions, validate_partition
from l0gc.errors import ConfigError, InvalidRecord

__all__ = [
    "MEMBER_RECORD_VERSION",
    "Assignment",
    "ClaimRecord",
    "Identity",
    "MemberRecord",
    "View",
    "check_member_id",
    "compact_partitions",
    "decode_claim",
    "decode_member",
    "validate_address",
    "weight",
]


MEMBER_RECORD_VERSION = 1
MAX_MEMBER_RECORD_BYTES = 1024 * 1024
MAX_ADDRESS = 255
_ADDRESS = re.compile(r"https?://(?:[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


def weight(member_id: str, partition: str) -> int:
    """The rendezvous weight of `member_id` for `partition` (same in every process)."""
    digest = hashlib.blake2b(
        member_id.encode() + b"\x00" + partition.encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big")


def validate_address(address: str) -> str:
    """Return `address` if it is a plain ``http(s)://host[:port]`` URL, else ConfigError."""
    if len(address) > MAX_ADDRESS or _ADDRESS.fullmatch(address) is None:
        raise ConfigError(
            f"replica address {address[:80]!r} is not a plain http(s)://HOST[:PORT] URL of at "
            f"most {MAX_ADDRESS} characters (no path, no user, no query); give the URL other "
            "replicas and writers reach this one at, e.g. http://10.0.0.5:8080"
        )
    port = address.rpartition(":")[2]
    if port.isdigit() and not 0 < int(port) < 65536:
        raise ConfigError(f"replica address {address!r} has port {port}, outside 1-65535")
    return address


def compact_partitions(names: Iterable[str]) -> str:
    """A short `--partitions` spec that `expand_partitions` turns back into `names`.

    Runs of names that differ only in a final decimal segment become ``PREFIX/LO-HI``
    (padding kept as `expand_partitions` reads it); everything else is listed as is.
    The result is checked by expanding it: a run that would not come back exactly is
    written out name by name.
    """
    wanted = list(dict.fromkeys(names))
    numbered: dict[str, list[str]] = {}  # prefix -> the decimal last segments under it
    plain: list[str] = []
    for name in wanted:
        head, sep, last = name.rpartition("/")
        if last.isascii() and last.isdigit():
            numbered.setdefault(head + sep, []).append(last)
        else:
            plain.append(name)
    runs: dict[tuple[str, int], list[int]] = {}
    for prefix, texts in numbered.items():
        # A zero-padded width seen under this prefix takes every number of that width
        # (p/08, p/09, p/10 is one run 08-10); the others are plain numbers.
        padded = {len(t) for t in texts if len(t) > 1 and t.startswith("0")}
        for text in texts:
            width = len(text) if len(text) in padded else 0
            runs.setdefault((prefix, width), []).append(int(text))
    entries: list[str] = []
    for (prefix, width), numbers in runs.items():
        numbers.sort()
        start = previous = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            entries.append(_run_entry(prefix, width, start, previous))
            if number is not None:
                start = previous = number
    entries.extend(plain)
    spec = ",".join(entries)
    try:
        if set(expand_partitions(spec)) == set(wanted):
            return spec
    except ConfigError:
        pass
    return ",".join(wanted)


def _run_entry(prefix: str, width: int, low: int, high: int) -> str:
    if low == high:
        return f"{prefix}{low:0{width}d}" if width else f"{prefix}{low}"
    if width:
        return f"{prefix}{low:0{width}d}-{high:0{width}d}"
    return f"{prefix}{low}-{high}"


@dataclass(frozen=True, slots=True)
class Identity:
    """One running replica: its member id and the etcd lease its records live on."""

    member_id: str
    lease: int


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """A live replica as announced in etcd (bound to its lease)."""

    member_id: str
    address: str
    partitions: frozenset[str]
    lease: int = 0
    spec: str = ""
    """The `partitions` as a compact `--partitions` spec (what is stored)."""

    def encode(self, started_at: float) -> bytes:
        """The record as stored (the lease is the key's, not part of the value)."""
        spec = self.spec or compact_partitions(sorted(self.partitions))
        doc = {
            "version": MEMBER_RECORD_VERSION,
            "member": self.member_id,
            "address": self.address,
            "partitions": spec,
            "started_at": round(started_at, 3),
        }
        return strictjson.dumps(doc, what="member record", compact=True).encode()


def _field(doc: dict[str, Any], name: str, kind: type, what: str) -> Any:
    value = doc.get(name)
    if type(value) is not kind:
        raise InvalidRecord(f"{what}: field {name!r} must be a {kind.__name__}, got {value!r:.60}")
    return value


def _member_id(value: str, what: str) -> str:
    if not value or len(value) > MAX_PARTITION_NAME or not all("!" <= ch <= "~" for ch in value):
        raise InvalidRecord(f"{what}: member id {value!r:.60} is not 1-200 printable characters")
    return value


def decode_member(raw: bytes, *, key_id: str, lease: int) -> MemberRecord:
    """Parse a member record stored under the key of `key_id`; InvalidRecord says why not."""
    what = f"member record {key_id!r:.60}"
    doc = strictjson.loads(raw, what=what, max_bytes=MAX_MEMBER_RECORD_BYTES, max_depth=2)
    if not isinstance(doc, dict):
        raise InvalidRecord(f"{what}: not a JSON object")
    if doc.get("version") != MEMBER_RECORD_VERSION or type(doc.get("version")) is not int:
        raise InvalidRecord(f"{what}: version {doc.get('version')!r:.20} is not 1")
    member_id = _member_id(_field(doc, "member", str, what), what)
    if member_id != key_id:
        raise InvalidRecord(f"{what}: names member {member_id!r:.60}, not its key's")
    address = _field(doc, "address", str, what)
    spec = _field(doc, "partitions", str, what)
    try:
        validate_address(address)
        partitions = frozenset(expand_partitions(spec))
    except ConfigError as exc:
        raise InvalidRecord(f"{what}: {exc}") from None
    return MemberRecord(member_id, address, partitions, lease, spec)


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """Who holds a partition's claim: a member id and the lease the claim key is on."""

    member_id: str
    lease: int

    def encode(self) -> bytes:
        """The claim key's value."""
        doc = {"version": MEMBER_RECORD_VERSION, "member": self.member_id}
        return strictjson.dumps(doc, what="claim", compact=True).encode()

    def held_by(self, identity: Identity) -> bool:
        """True if `identity` (this very process, lease included) holds the claim."""
        return self.member_id == identity.member_id and self.lease == identity.lease


def decode_claim(raw: bytes, *, partition: str, lease: int) -> ClaimRecord:
    """Parse a claim value; InvalidRecord says why not."""
    what = f"claim of partition {partition!r:.60}"
    doc = strictjson.loads(raw, what=what, max_bytes=4096, max_depth=2)
    if not isinstance(doc, dict) or doc.get("version") != MEMBER_RECORD_VERSION:
        raise InvalidRecord(f"{what}: not a version 1 claim object")
    return ClaimRecord(_member_id(_field(doc, "member", str, what), what), lease)


class Assignment:
    """Rendezvous assignment of partitions to `members` (memoised per partition)."""

    def __init__(self, members: Mapping[str, MemberRecord]) -> None:
        self.members = dict(members)
        self._owner: dict[str, str | None] = {}

    def owner(self, partition: str) -> str | None:
        """The member `partition` belongs to, None if no member lists it."""
        try:
            return self._owner[partition]
        except KeyError:
            pass
        best: tuple[int, str] | None = None
        for member_id, member in self.members.items():
            if partition in member.partitions:
                candidate = (weight(member_id, partition), member_id)
                if best is None or candidate > best:
                    best = candidate
        owner = None if best is None else best[1]
        self._owner[partition] = owner
        return owner

    def of(self, member_id: str) -> list[str]:
        """The partitions assigned to `member_id`, sorted."""
        member = self.members.get(member_id)
        if member is None:
            return []
        return sorted(p for p in member.partitions if self.owner(p) == member_id)


@dataclass(frozen=True, slots=True)
class View:
    """Members and claims as of one etcd revision; `problems`: records that did not parse."""

    revision: int
    members: Mapping[str, MemberRecord]
    claims: Mapping[str, ClaimRecord]
    problems: tuple[str, ...] = ()
    assignment: Assignment = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "assignment", Assignment(self.members))

    def with_assignment(self, assignment: Assignment) -> View:
        """The same view reusing `assignment` (made for the same members: memo kept)."""
        object.__setattr__(self, "assignment", assignment)
        return self

    def is_live(self, claim: ClaimRecord) -> MemberRecord | None:
        """The member holding `claim` if it is a live member on the same lease."""
        member = self.members.get(claim.member_id)
        return member if member is not None and member.lease == claim.lease else None


def check_member_id(member_id: str) -> str:
    """A member id must be a valid key segment (the same rule as partition names)."""
    try:
        return validate_partition(member_id)
    except ConfigError:
        raise ConfigError(
            f"owner id {member_id!r:.80} cannot name a replica: use 1-{MAX_PARTITION_NAME} "
            "printable ASCII characters without whitespace (--owner-id)"
        ) from None
