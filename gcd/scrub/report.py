"""What one `gcd scrub` run found, as data, and its JSON document (docs/scrub.md).

Built by `gcd.scrub.run`; printed by `gcd.cli.scrub`, exported by `gcd.scrub.metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from gcd.observe.report import iso_utc
from gcd.scrub.findings import (
    Cause,
    ListingTally,
    MissingKey,
    SilentPartition,
    StrandedRule,
    UnknownKey,
)

__all__ = ["NO_PARTITION_COMPONENT", "REPORT_VERSION", "ScrubReport"]

REPORT_VERSION: Final = 1
NO_PARTITION_COMPONENT: Final = (
    "not applicable: the key layout has no partition component (its 000-999 prefix "
    "spreads load, it names no partition), so no key can be matched to a partition record"
)


@dataclass(frozen=True, slots=True)
class ScrubReport:
    """One run's findings and what it cost."""

    namespace: str
    store: str
    """The bucket and root, as a URL-like name (s3://bucket/root)."""
    at: float
    """When the run started, unix seconds."""
    duration_s: float
    safe_epoch: int | None
    cluster_epoch: int | None
    partitions: int
    referencing: int
    """Partitions whose writers send references."""
    referenced: int
    """Distinct referenced keys HEADed."""
    present: int
    missing: tuple[MissingKey, ...]
    unknown: tuple[UnknownKey, ...]
    released: int
    """Keys missing at the HEAD but no longer referenced when the references were read
    again: released by the reconciler meanwhile, then rightly deleted; not findings."""
    journal: str | None
    """Where the journal was searched (None: no journal given)."""
    stranded_rule: StrandedRule | None
    stranded_note: str | None
    """Why stranded garbage was not checked (None: it was, with `stranded_rule`)."""
    listing: ListingTally | None
    """What the listing of the root found (None: --skip-listing)."""
    silent: tuple[SilentPartition, ...]
    invalid: tuple[tuple[str, str], ...]
    """(partition, why its record cannot be read)."""
    head_requests: int
    list_requests: int

    @property
    def deleted_by_l0gc(self) -> tuple[MissingKey, ...]:
        """The missing keys a journaled l0gc request deleted: a bug, page someone."""
        return tuple(m for m in self.missing if m.cause is Cause.DELETED_BY_L0GC)

    @property
    def stranded(self) -> int:
        """Stranded keys found (0 when not checked)."""
        return 0 if self.listing is None else self.listing.stranded

    @property
    def unparsable(self) -> int:
        """Keys under the root no layout parses (0 when not listed)."""
        return 0 if self.listing is None else self.listing.unparsable

    @property
    def healthy(self) -> bool:
        """True when the run found nothing at all to report."""
        return not (
            self.missing
            or self.unknown
            or self.stranded
            or self.unparsable
            or self.silent
            or self.invalid
        )

    def to_dict(self) -> dict[str, Any]:
        """The `--json` document (docs/scrub.md#json); version 1 only ever gains fields."""
        listing = self.listing
        stranded: dict[str, Any] = {"checked": False, "reason": self.stranded_note}
        if self.stranded_note is None and self.stranded_rule is not None:
            stranded = {
                "checked": listing is not None,
                "reason": None if listing is not None else "the root was not listed",
                "rule": self.stranded_rule.to_dict(),
                "count": 0 if listing is None else listing.stranded,
                "bytes": 0 if listing is None else listing.stranded_bytes,
                "oldest": [] if listing is None else [k.to_dict() for k in listing.oldest_stranded],
            }
        unparsable: dict[str, Any] = {"checked": False, "count": 0, "bytes": 0, "examples": []}
        if listing is not None:
            unparsable = {
                "checked": True,
                "count": listing.unparsable,
                "bytes": listing.unparsable_bytes,
                "examples": [k.to_dict() for k in listing.unparsable_examples],
            }
        return {
            "version": REPORT_VERSION,
            "healthy": self.healthy,
            "namespace": self.namespace,
            "store": self.store,
            "at": self.at,
            "when": iso_utc(self.at),
            "duration_s": round(self.duration_s, 3),
            "safe_epoch": self.safe_epoch,
            "cluster_epoch": self.cluster_epoch,
            "references": {
                "partitions": self.partitions,
                "referencing": self.referencing,
                "keys": self.referenced,
                "present": self.present,
                "missing": len(self.missing),
                "unknown": len(self.unknown),
                "released": self.released,
            },
            "missing": [m.to_dict() for m in self.missing],
            "unknown": [u.to_dict() for u in self.unknown],
            "journal": {"searched": self.journal is not None, "where": self.journal},
            "stranded": stranded,
            "unparsable": unparsable,
            "uncovered_prefixes": {"applicable": False, "reason": NO_PARTITION_COMPONENT},
            "silent_partitions": [s.to_dict() for s in self.silent],
            "invalid_records": [{"partition": p, "error": e} for p, e in self.invalid],
            "listing": None
            if listing is None
            else {
                "listed": listing.listed,
                "bytes": listing.listed_bytes,
                "nested_roots": sorted(set(listing.nested)),
                "under_nested_roots": listing.under_nested,
            },
            "requests": {"head": self.head_requests, "list": self.list_requests},
        }
