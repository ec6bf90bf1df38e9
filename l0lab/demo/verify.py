"""The end of a demo run: read everything back and say, with numbers, how it went.

The bucket (or Azure container) is read back with the demo's own client, independently
of the sweeper. `read_back`, when the writers have stopped and before the reconciler
catches up: a HeadObject (Get Blob Properties) for every object the ledger says is
referenced (each one missing is a loss). `check_bucket`, after the final sweeper
round: a full listing of the demo's root, each key sorted by what the ledger knows of
it. Garbage still there is reported as it is (normally none: after the catch-up every
object is garbage and M passes the newest epoch within two epoch ticks; objects younger
than the grace period stay).

`DemoSummary` is the `gcd demo --json` document; `exit_code` turns it into the exit
status: 0 only when no live object was lost (and, for runs of 10 s or more, the
sweeper deleted something).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from l0gc import exitcodes
from l0lab.demo.storage import DemoObjects
from l0lab.testing.ledger import Ledger, ObjectState

__all__ = [
    "SUMMARY_VERSION",
    "BucketCheck",
    "DemoSummary",
    "Readback",
    "check_bucket",
    "exit_code",
    "problems",
    "read_back",
    "text_report",
]

SUMMARY_VERSION: Final = 1
MIN_SECONDS_FOR_DELETES: Final = 10.0
_HEAD_CONCURRENCY = 16
_NOUNS: Final = {
    "s3": ("bucket", "HEAD"),
    "azure": ("container", "Get Blob Properties"),
    "gcs": ("bucket", "objects.get"),
}
"""What the text report calls the storage and its existence check, by `DemoSummary.storage`."""


@dataclass(frozen=True, slots=True)
class Readback:
    """HeadObject of every object that was referenced when the writers stopped."""

    referenced: int
    present: int


async def read_back(ledger: Ledger, bucket: DemoObjects) -> Readback:
    """HEAD every referenced object; each one missing is recorded as a loss."""
    referenced = ledger.referenced()
    gate = asyncio.Semaphore(_HEAD_CONCURRENCY)

    async def head(key: str) -> bool:
        async with gate:
            return await bucket.exists(key)

    found = await asyncio.gather(*(head(key) for key in referenced))
    for key, present in zip(referenced, found, strict=True):
        if not present:
            ledger.missing_at_readback(key)
    return Readback(referenced=len(referenced), present=sum(found))


@dataclass(frozen=True, slots=True)
class BucketCheck:
    """The demo's root listed at the end, each key sorted by what the ledger knows."""

    present: int
    garbage_remaining: int
    live_present: int
    unknown_present: int
    deleted_but_present: int


async def check_bucket(ledger: Ledger, bucket: DemoObjects, root: str) -> BucketCheck:
    """List everything under `root` and count it by ledger state."""
    keys = await bucket.list_keys(root + "/")
    states = Counter(ledger.state(key) for key in keys)
    return BucketCheck(
        present=len(keys),
        garbage_remaining=states[ObjectState.RECONCILED] + states[ObjectState.ORPHANED],
        live_present=states[ObjectState.REFERENCED] + states[ObjectState.UPLOADED],
        unknown_present=states[None],
        deleted_but_present=states[ObjectState.DELETED],
    )


@dataclass(frozen=True, slots=True)
class DemoSummary:
    """The outcome of a demo run (the `--json` document)."""

    version: int = SUMMARY_VERSION
    ok: bool = False
    interrupted: bool = False
    duration_s: float = 0.0
    partitions: int = 0
    objects_written: int = 0
    objects_committed: int = 0
    orphans: int = 0
    deleted: int = 0
    live_lost: int = 0
    live_at_stop: int = 0
    live_verified: int = 0
    garbage_remaining: int = 0
    max_epoch_written: int | None = None
    unknown_deleted: int = 0
    safe_epoch: int | None = None
    cluster_epoch: int | None = None
    list_requests: int = 0
    delete_requests: int = 0
    put_requests: int = 0
    deletes_per_s: float = 0.0
    final_round: dict[str, Any] = field(default_factory=dict)
    losses: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    etcd: str = ""
    etcd_pid: int | None = None
    storage: str = "s3"
    endpoint_url: str | None = None
    bucket: str = ""
    root: str = ""
    namespace: str = ""
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return asdict(self)


def exit_code(summary: DemoSummary) -> int:
    """0 ok; 1 a live object was lost or nothing was deleted; 130 interrupted."""
    if summary.live_lost:
        return exitcodes.PARTIAL_FAILURE
    if summary.interrupted:
        return exitcodes.INTERRUPTED
    return exitcodes.OK if summary.ok else exitcodes.PARTIAL_FAILURE


def problems(summary: DemoSummary, duration_s: float) -> list[str]:
    """Why a run that lost nothing is still not a success (empty when it is)."""
    found: list[str] = []
    if summary.live_lost:
        found.append(f"{summary.live_lost} live objects lost")
    if duration_s >= MIN_SECONDS_FOR_DELETES and summary.deleted == 0 and not summary.interrupted:
        found.append(f"nothing was deleted in a {duration_s:g} s run")
    return found


def _shown(value: int | None) -> str:
    return "-" if value is None else str(value)


def text_report(summary: DemoSummary) -> str:
    """A few lines for people, printed after the run."""
    verdict = "OK" if summary.ok else ("INTERRUPTED" if summary.interrupted else "FAILED")
    where, head = _NOUNS.get(summary.storage, _NOUNS["s3"])
    final = summary.final_round
    lines = [
        f"l0gc demo: {verdict} after {summary.duration_s:.1f} s",
        (
            f"  wrote     {summary.objects_written} objects to {summary.partitions} partitions, "
            f"{summary.orphans} of them orphans (uploads whose fence was refused: never "
            f"committed, garbage at once); cluster epoch {_shown(summary.cluster_epoch)}, "
            f"final global M {_shown(summary.safe_epoch)}"
        ),
        (
            f"  sweeper   deleted {summary.deleted} objects with {summary.list_requests} LIST and "
            f"{summary.delete_requests} DELETE requests ({summary.deletes_per_s:.1f} deletes/s "
            "averaged over the run)"
        ),
        (
            f"  verified  when the writers stopped, {summary.live_at_stop} objects were still "
            f"referenced (not yet reconciled): {summary.live_verified} read back ({head}); live "
            f"objects lost: {summary.live_lost}. The reconciler then caught up, so they became "
            "garbage too"
            + (" and were deleted with the rest" if not summary.garbage_remaining else "")
        ),
        (
            f"  left      {summary.garbage_remaining} garbage objects in the {where} (newest "
            f"epoch written {summary.max_epoch_written})"
        ),
    ]
    if final:
        lines.append(
            f"  final round: M {final.get('safe_epoch')}, deleted {final.get('deleted')}, "
            f"blocked: {final.get('blocked_reason') or 'no'}"
        )
    lines.extend(f"  problem   {problem}" for problem in summary.problems)
    lines.extend(f"  note      {note}" for note in summary.notes)
    lines.extend(
        f"  LOST      {loss['key']} (partition {loss['partition']}, epoch {loss['epoch']}: "
        f"{loss['how']})"
        for loss in summary.losses
    )
    servers = f"etcd {summary.etcd} namespace {summary.namespace}; {where} {summary.bucket}"
    lines.append(f"  servers   {servers} root {summary.root}")
    return "\n".join(lines) + "\n"
