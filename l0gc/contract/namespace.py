"""The pure part of the etcd contract: names, the publish rule, the pause marker.

No I/O here; `l0gc.etcd.store` applies these rules to etcd. They are what a writer in
another language must follow to publish (docs/etcd-contract.md is the reference):

- Namespaces start with '/' and do not end with '/' (keys are `{ns}/...`).
- Partition names are 1-200 printable ASCII characters without whitespace; '/' is
  allowed (`orders/0`), so a partition's key is `{ns}/partitions/orders/0`.
- A partition list in configuration (`watermark serve --partitions`, the chart's
  `publisher.config.partitions`) is comma-separated, and an entry whose last segment is
  a range `LO-HI` stands for every number in it: `orders/0-3` is `orders/0` ...
  `orders/3` (`expand_partitions`).
- A publication replaces the stored record only when it comes from the current owner
  (same `owner` and `owner_epoch`) and does not lower M(p) (`decide_publication`).
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import Any

from l0gc import strictjson
from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import References
from l0gc.errors import ConfigError, InvalidJson

__all__ = [
    "MAX_EXPANDED_PARTITIONS",
    "MAX_PARTITION_NAME",
    "PUBLISH_BATCH",
    "Publication",
    "PublishOutcome",
    "PublishStatus",
    "decide_publication",
    "expand_partitions",
    "partition_order",
    "pause_at",
    "pause_marker",
    "pause_reason",
    "validate_namespace",
    "validate_new_partition",
    "validate_partition",
]

MAX_PARTITION_NAME = 200
MAX_PAUSE_MARKER_BYTES = 64 * 1024
"""A larger pause marker is not read (it still pauses: any marker means paused)."""
LATEST_PAUSE_AT = 253402300799.0
"""9999-12-31T23:59:59Z: a pause marker's "at" above it (or below 0) is shown as unknown."""
MAX_EXPANDED_PARTITIONS = 100_000
"""Most partitions one partition list may name (a typo like `0-9999999` is refused)."""
PUBLISH_BATCH = 100
"""Records per publish transaction (etcd allows 128 compares and 128 ops by default)."""


def validate_partition(partition: str) -> str:
    """Return `partition` if it is a valid name, else raise ConfigError saying why."""
    if (
        not partition
        or len(partition) > MAX_PARTITION_NAME
        or not all("!" <= ch <= "~" for ch in partition)
    ):
        raise ConfigError(
            f"partition name {partition!r} is not valid; expected 1-{MAX_PARTITION_NAME} "
            "printable ASCII characters without whitespace ('/' is allowed)"
        )
    return partition


def validate_new_partition(partition: str) -> str:
    """`validate_partition`, and no "." or ".." segment between slashes: HTTP clients that
    normalise dot segments (RFC 3986 5.2.4) could never reach such a partition, so it is
    refused when registered (a record of that name written before stays readable)."""
    validate_partition(partition)
    if any(segment in {".", ".."} for segment in partition.split("/")):
        raise ConfigError(
            f"partition name {partition!r} is not valid: a '.' or '..' segment between "
            "slashes is changed by HTTP clients that normalise paths; rename it"
        )
    return partition


_DIGITS = re.compile(r"([0-9]+)")


def partition_order(partition: str) -> tuple[tuple[int, int, str], ...]:
    """The key that lists partitions as people count them: runs of digits compare as
    numbers (``orders/2`` before ``orders/10``), the rest as text; names equal as numbers
    (``a/01``, ``a/1``) stay apart by their text, so the order is total. A run compares
    by its length without leading zeros, then its digits: never `int()`, which refuses
    runs over 4,300 digits (a forged etcd key must not crash a listing)."""
    parts: list[tuple[int, int, str]] = []
    for index, piece in enumerate(_DIGITS.split(partition)):
        digits = piece.lstrip("0")
        parts.append((0, len(digits), digits) if index % 2 else (1, 0, piece))
    parts.append((1, 0, partition))
    return tuple(parts)


_RANGE = re.compile(r"(?P<prefix>(?:.*/)?)(?P<low>[0-9]+)-(?P<high>[0-9]+)")


def _expand_entry(entry: str) -> list[str]:
    """One list entry: a name, or `PREFIX/LO-HI` (or `LO-HI`) for a range of names."""
    match = _RANGE.fullmatch(entry)
    if match is None:
        return [validate_partition(entry)]
    prefix, low_text, high_text = match.group("prefix", "low", "high")
    low, high = int(low_text), int(high_text)
    # A range like 00-63 keeps its zero padding (00, 01, ... 63); 0-63 has none.
    width = len(low_text) if low_text.startswith("0") and len(low_text) > 1 else 0
    if width and len(high_text) != width:
        raise ConfigError(
            f"partition range {entry!r}: zero-padded bounds must have the same width "
            f"(e.g. {prefix}{'0' * width}-{'9' * width})"
        )
    if low > high:
        raise ConfigError(
            f"partition range {entry!r} is empty: {low} > {high}; write it low-high, "
            f"e.g. {prefix}{high_text}-{low_text}"
        )
    if high - low + 1 > MAX_EXPANDED_PARTITIONS:
        raise ConfigError(
            f"partition range {entry!r} names {high - low + 1} partitions, more than "
            f"{MAX_EXPANDED_PARTITIONS}; check the bounds"
        )
    return [validate_partition(f"{prefix}{n:0{width}d}") for n in range(low, high + 1)]


def expand_partitions(spec: str) -> list[str]:
    """The partition names of a comma-separated list with ranges, in order.

    `"orders/0-2,audit"` -> `["orders/0", "orders/1", "orders/2", "audit"]`; `"0-63"` is
    the 64 partitions `0` ... `63`; `"p/00-15"` keeps the padding (`p/00` ... `p/15`).
    A range is an entry whose last '/'-segment is `LO-HI` (decimal, LO <= HI), so a
    partition literally named like a range cannot be listed. Whitespace around entries
    and empty entries are ignored. ConfigError names the entry when a name is not valid
    (`validate_partition`), a range is empty or too large, or a partition is listed
    twice, and the list may name at most `MAX_EXPANDED_PARTITIONS` partitions.
    """
    names: list[str] = []
    seen: set[str] = set()
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        for name in _expand_entry(entry):
            if name in seen:
                raise ConfigError(
                    f"partition {name!r} is listed twice (entry {entry!r}); list each "
                    "partition once"
                )
            seen.add(name)
            names.append(name)
        if len(names) > MAX_EXPANDED_PARTITIONS:
            raise ConfigError(
                f"the partition list names more than {MAX_EXPANDED_PARTITIONS} partitions; "
                "split them between publishers"
            )
    return names


def validate_namespace(namespace: str) -> str:
    """Return `namespace` if it is a valid key prefix, else raise ConfigError."""
    if (
        not namespace.startswith("/")
        or namespace.endswith("/")
        or not all("!" <= ch <= "~" for ch in namespace)
    ):
        raise ConfigError(
            f"etcd namespace {namespace!r} is not valid; expected printable ASCII without "
            "whitespace, starting with '/' and not ending with '/', e.g. /l0gc/prod"
        )
    return namespace


@dataclass(frozen=True, slots=True)
class Publication:
    """What an owner wants stored for one partition: its M(p) and state for operators."""

    partition: str
    owner: str
    owner_epoch: int
    watermark: int
    window: tuple[int | None, int | None] = (None, None)
    tracker: dict[str, Any] | None = None
    sealed: bool = False
    """`tracker` holds every log entry: the owner stops hosting the partition cleanly."""
    waiting: dict[str, Any] | None = None
    """Why M(p) does not follow the cluster epoch, without "since" (the store keeps the
    stored one while the reason stays the same; `l0gc.contract.record`)."""
    references: References | None = None
    """The keys its unreconciled entries name (None: its writer sends none)."""


class PublishStatus(enum.Enum):
    """What happened to one publication."""

    OK = "ok"  # written
    REFUSED_LOWER = "refused_lower"  # would lower M(p): not written
    STALE_OWNER = "stale_owner"  # another owner took over: not written
    MISSING = "missing"  # partition not registered: not written
    MALFORMED = "malformed"  # stored record unreadable, fencing impossible: not written


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    """The result for one partition; `record` is the one now stored (None if unreadable)."""

    partition: str
    status: PublishStatus
    record: PartitionRecord | None
    detail: str | None = None


def decide_publication(pub: Publication, current: PartitionRecord | None) -> PublishStatus:
    """The publish rule (pure): OK means `pub` may replace `current`."""
    if current is None:
        return PublishStatus.MISSING
    if current.owner_epoch != pub.owner_epoch or current.owner != pub.owner:
        return PublishStatus.STALE_OWNER
    if pub.watermark < current.watermark:
        return PublishStatus.REFUSED_LOWER
    return PublishStatus.OK


def pause_marker(reason: str, at: float) -> bytes:
    """The `{ns}/gc/paused` value: JSON {"reason": ..., "at": unix seconds}."""
    doc = {"reason": reason or "no reason given", "at": at}
    return strictjson.dumps(doc, what="pause marker", nonfinite_as_null=True).encode()


def _pause_doc(raw: bytes) -> dict[str, Any]:
    """The decoded marker; InvalidJson when it is not a strict JSON object within bounds."""
    doc = strictjson.loads(raw, what="pause marker", max_bytes=MAX_PAUSE_MARKER_BYTES, max_depth=4)
    if not isinstance(doc, dict):
        raise InvalidJson("pause marker", "it is not a JSON object")
    return doc


def pause_reason(raw: bytes) -> str:
    """The reason stored in a pause marker; any marker, even unreadable, means paused.

    Never raises: an unreadable marker gives "unreadable pause marker (<what is wrong>)".
    """
    try:
        reason = _pause_doc(raw).get("reason")
    except InvalidJson as exc:
        return f"unreadable pause marker ({exc.problem})"
    if not isinstance(reason, str):
        return 'unreadable pause marker (it has no "reason" string)'
    return reason


def pause_at(raw: bytes | None) -> float | None:
    """When the marker says GC was paused (unix seconds); None if absent or not sane.

    Sane: a finite number from 0 to `LATEST_PAUSE_AT` (what a date can show). Never raises.
    """
    if raw is None:
        return None
    try:
        at = _pause_doc(raw).get("at")
    except InvalidJson:
        return None
    if not isinstance(at, int | float) or isinstance(at, bool):
        return None
    return float(at) if math.isfinite(at) and 0 <= at <= LATEST_PAUSE_AT else None
