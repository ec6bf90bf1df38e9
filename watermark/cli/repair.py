"""`watermark partition repair NAME`: write a validated partition record by CAS.

The flags (`OPTIONS`) become a `watermark.api.repair.RecordChanges`; the operation, its
checks and why (never lowering M(p) without --force, revoking a live owner first, one
transaction comparing the record's revision) are `watermark.api.repair`. Prints what
was (or, with --dry-run, would be) written.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from l0gc.contract.kv import KV
from l0gc.etcd.store import WatermarkStore
from l0gc.options import Option, boolean, integer, text
from watermark.api.owners import FORCE_OPTIONS
from watermark.api.repair import RecordChanges, repair_partition

__all__ = ["OPTIONS", "run", "write_text"]

OPTIONS: tuple[Option, ...] = (
    Option(
        "--watermark",
        integer(-1),
        None,
        "the new M(p), >= -1 and below the cluster epoch (default: unchanged)",
        "M",
    ),
    Option(
        "--created-epoch",
        integer(0),
        None,
        "the new created_epoch, at most the cluster epoch (default: unchanged)",
        "E",
    ),
    Option("--owner", text, None, "set the owner id (owner_epoch + 1 unless --owner-epoch)", "ID"),
    Option(
        "--owner-epoch",
        integer(0),
        None,
        "set owner_epoch exactly (e.g. the running owner's, so its next publish is "
        "accepted; default: unchanged, + 1 with --owner or --no-owner)",
        "N",
    ),
    Option(
        "--no-owner",
        boolean,
        False,
        "clear the owner (owner_epoch + 1): the next publisher adopts it",
        switch=True,
    ),
    Option(
        "--reset-tracker",
        boolean,
        False,
        "drop the stored tracker (a tracker no later commit can pass, e.g. an applied "
        "offset at the maximum) and the owner (owner_epoch + 1): the next owner starts "
        "afresh from created_epoch, its window above M(p), its log end unknown until a "
        "commit or an adopt with the log end",
        switch=True,
    ),
    *FORCE_OPTIONS,
    Option(
        "--dry-run",
        boolean,
        False,
        "print the record that would be written; write nothing",
        switch=True,
    ),
)
"""The flags of `watermark partition repair` (its NAME is positional)."""


async def run(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    """Run `watermark partition repair NAME` with the flags given."""
    changes = RecordChanges(
        watermark=args.watermark,
        created_epoch=args.created_epoch,
        owner=args.owner,
        owner_epoch=args.owner_epoch,
        no_owner=args.no_owner,
        reset_tracker=args.reset_tracker,
        force=args.force,
        reason=args.reason,
        revoke_wait_s=args.revoke_wait,
        dry_run=args.dry_run,
    )
    return await repair_partition(store, kv, args.name, changes)


def write_text(result: dict[str, Any]) -> None:
    """The text output of `watermark partition repair`."""
    record, previous = result["record"], result["previous"]
    before = "malformed" if previous is None else f"M(p)={previous['watermark']}"
    verb = "repaired" if result["written"] else "would repair (dry run)"
    sys.stdout.write(
        f"{verb} {result['partition']!r}: {before} -> M(p)={record['watermark']}  "
        f"created_epoch={record['created_epoch']}  owner={record['owner'] or 'none'}  "
        f"owner_epoch={record['owner_epoch']}\n"
    )
