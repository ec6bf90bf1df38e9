"""`gcd journal verify|show|prune`: check a deletion journal, find who deleted a key, or
apply the retention.

Design notes: docs/internals/cli.md, `gcd.cli.journal`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gcd.cli.options import (
    JOURNAL_OPTIONS,
    JOURNAL_READ_OPTIONS,
    LAYOUT_OPTIONS,
    QUIET_LOG_LEVEL,
    S3_OPTIONS,
    layout_from_args,
    resolve,
)
from gcd.cli.output import write_json
from gcd.cli.storage import AZURE_OPTIONS, GCS_OPTIONS, store_settings
from gcd.journal.check import (
    FindingKind,
    VerifyReport,
    check_anchors,
    check_history,
    check_records,
    etcd_anchors,
    find_key,
    history_reader,
)
from gcd.journal.places import read_journal_places, unread_shipped
from gcd.journal.prune import prune_anchors, prune_audit
from gcd.journal.records import (
    JournalRead,
    read_journal,
)
from gcd.rules.layout import KeyLayout
from gcd.service.reader import open_reader
from gcd.storage.backend import StoreSettings
from l0gc import exitcodes
from l0gc.display import printable
from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings, add_etcd_arguments
from l0gc.logs import configure_logging
from l0gc.options import Option, add_config_option, add_options, boolean, text

__all__ = ["OUTPUT_VERSION", "add_arguments", "run"]

OUTPUT_VERSION = 1
_MAX_SEGMENT_READ = 1 << 30

_READ_OPTIONS: tuple[Option, ...] = (
    *S3_OPTIONS,
    *AZURE_OPTIONS,
    *GCS_OPTIONS,
    *LAYOUT_OPTIONS,
    *JOURNAL_READ_OPTIONS,
    *(o for o in JOURNAL_OPTIONS if o.flag == "--journal-retention"),
    Option("--key", text, None, "show: the object key to explain", "KEY"),
    Option("--json", boolean, False, "print one JSON document on stdout", switch=True),
    QUIET_LOG_LEVEL,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`journal verify|show` options."""
    parser.add_argument(
        "action",
        choices=["verify", "show", "prune"],
        help="verify the journal, show the records of one key, or delete "
        "what is older than --journal-retention",
    )
    add_config_option(parser)
    add_options(parser, _READ_OPTIONS, "journal and output")
    add_etcd_arguments(parser)


def _store(args: argparse.Namespace) -> StoreSettings | None:
    """The store whose audit prefix holds the journal: any store the flags name, None
    without --journal-prefix or a bucket (container)."""
    if args.journal_prefix is None:
        return None
    if args.bucket is None and getattr(args, "container", None) is None:
        return None
    return store_settings(args)


async def _read(args: argparse.Namespace) -> JournalRead:
    store = _store(args)
    if store is None:
        if args.journal_dir is None:
            raise ConfigError(
                "give --journal-dir DIR, or --bucket B and --journal-prefix P "
                "(both when the sweepers ship their segments)"
            )
        read = read_journal([Path(part) for part in args.journal_dir.split(",") if part])
        missing = unread_shipped(read)
        if missing is not None:
            sys.stderr.write(f"gcd journal: {missing}\n")
        return read
    async with open_reader(None, store) as reader:
        return await read_journal_places(
            args.journal_dir, reader.bucket(), args.journal_prefix, max_bytes=_MAX_SEGMENT_READ
        )


def _headers(read: JournalRead, field: str) -> set[str]:
    return {
        str(r.doc.get(field))
        for r in read.records
        if r.kind == "segment" and r.doc.get(field) is not None
    }


def _layout(args: argparse.Namespace, read: JournalRead) -> KeyLayout:
    """The layout of the flags; the journal's own root when --root was left at its default."""
    roots = _headers(read, "root")
    default_root = next(o.default for o in LAYOUT_OPTIONS if o.flag == "--root")
    if len(roots) == 1 and args.root == default_root and args.key_pattern is None:
        args.root = next(iter(roots))
    return layout_from_args(args)


_NOT_CHECKED = (
    "NOT checked (no --etcd): M at each etcd revision a record claims, and "
    "whether each sweeper's journal reaches its end anchored in etcd (the last "
    "segment or the last records removed would not show); give --etcd and "
    "--namespace"
)


async def verify(args: argparse.Namespace, read: JournalRead) -> tuple[VerifyReport, list[str]]:
    """The report, and notes on what was and was not checked."""
    report = check_records(read, layout=_layout(args, read))
    notes: list[str] = []
    from_prefix = _store(args) is not None
    if from_prefix:
        notes.extend(
            check_anchors(
                read, read.audit_anchors, report, where="the audit prefix", require_all=True
            )
        )
    if args.etcd is None and not os.environ.get("L0GC_ETCD"):
        notes.append(_NOT_CHECKED)
        return report, notes
    settings = EtcdSettings.from_args(args)
    namespace = _namespace(args, read, settings.namespace)
    async with open_reader(settings) as reader:
        kv, _ = reader.etcd()
        anchors = await etcd_anchors(kv, namespace, settings.endpoints, report)
        notes.extend(
            check_anchors(
                read,
                anchors,
                report,
                where="etcd",
                shipped=read.audit_anchors if from_prefix else None,
            )
        )
        await check_history(read, history_reader(kv, namespace), report)
    notes.append(
        f"checked against etcd {','.join(settings.endpoints)} namespace {namespace} "
        f"({len(anchors)} journal anchors there)"
    )
    return report, notes


def _namespace(args: argparse.Namespace, read: JournalRead, default: str) -> str:
    """--namespace, else the one the journal names; a namespace the journal does not
    name is a usage error (a typo must not turn into violations)."""
    namespaces = _headers(read, "namespace")
    if args.namespace is None:
        return next(iter(namespaces)) if len(namespaces) == 1 else default
    if namespaces and args.namespace not in namespaces:
        raise ConfigError(
            f"--namespace {args.namespace!r}: this journal was written by sweepers of "
            f"{', '.join(sorted(map(repr, namespaces)))}: is --namespace right?"
        )
    return str(args.namespace)


def _verify_code(report: VerifyReport, notes: Sequence[str] = ()) -> int:
    if report.count(FindingKind.VIOLATION) or report.count(FindingKind.DAMAGE):
        return exitcodes.PARTIAL_FAILURE
    if report.count(FindingKind.UNVERIFIABLE) or _NOT_CHECKED in notes:
        return exitcodes.BLOCKED
    return exitcodes.OK


def _verdict(report: VerifyReport, notes: Sequence[str]) -> str:
    code = _verify_code(report, notes)
    if code == exitcodes.PARTIAL_FAILURE:
        return "FAILED"
    if _NOT_CHECKED in notes:
        return "NOT FULLY CHECKED: nothing wrong in the journal itself; not checked against etcd"
    if code == exitcodes.BLOCKED:
        return "NOT FULLY CHECKED: nothing wrong found, some records could not be checked"
    if report.count(FindingKind.TORN_TAIL):
        return "OK, with a torn tail (a crash cut a last record short; nothing was sent for it)"
    return "OK"


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


def _write_verify(report: VerifyReport, notes: Sequence[str]) -> None:
    lines = [
        f"journal verify: {_verdict(report, notes)}",
        (
            f"  {report.records} records from {report.sweepers} sweepers: {report.attempts} "
            f"delete requests, {report.keys_deleted} keys deleted, {report.outcome_unknown} "
            f"without an outcome; {report.revisions_checked} etcd revisions checked"
        ),
        (
            f"  violations {report.count(FindingKind.VIOLATION)}, damage "
            f"{report.count(FindingKind.DAMAGE)}, unverifiable "
            f"{report.count(FindingKind.UNVERIFIABLE)}, torn tails "
            f"{report.count(FindingKind.TORN_TAIL)}"
        ),
    ]
    lines.extend(f"  note      {note}" for note in notes)
    lines.extend(
        f"  {finding.kind.value.upper():<12} {printable(finding.source)}: "
        f"{printable(finding.message)}"
        for finding in report.findings[:200]
    )
    sys.stdout.write("\n".join(lines) + "\n")


def _write_show(key: str, stories: Sequence[Any]) -> None:
    if not stories:
        sys.stdout.write(f"no journal record of {printable(key)}\n")
        return
    lines = [f"{printable(key)}: {len(stories)} delete attempts"]
    for story in stories:
        pinned = (
            ", ".join(
                f"{printable(str(p[0]))} M(p)={p[1]}"
                for p in story.pinning
                if isinstance(p, list) and len(p) == 2
            )
            or "-"
        )
        how = "operator override" if story.override else f"etcd revision {story.revision}"
        lines.append(
            f"  {_when(story.at)}  {story.outcome}  by sweeper {printable(story.sweeper)}\n"
            f"      epoch {story.epoch} <= M {story.safe_epoch} (cluster epoch "
            f"{story.cluster_epoch}, {how}); pinned by {pinned}\n"
            f"      record {printable(story.source)}"
        )
    sys.stdout.write("\n".join(lines) + "\n")


async def prune(args: argparse.Namespace) -> int:
    """`gcd journal prune`: the retention of the audit prefix (and of etcd's anchors)."""
    store = _store(args)
    if args.journal_retention is None or store is None:
        raise ConfigError(
            "gcd journal prune needs --bucket B, --journal-prefix P and "
            "--journal-retention DURATION (e.g. 30d); on Azure, --container C for --bucket"
        )
    now = time.time()
    with_etcd = args.etcd is not None or bool(os.environ.get("L0GC_ETCD"))
    etcd = EtcdSettings.from_args(args) if with_etcd else None
    async with open_reader(etcd, store) as reader:
        report = await prune_audit(
            reader.bucket(), args.journal_prefix, retention_s=args.journal_retention, now=now
        )
        if reader.kv is not None and etcd is not None:
            await prune_anchors(
                reader.kv,
                etcd.namespace,
                retention_s=args.journal_retention,
                now=now,
                report=report,
            )
    if args.json:
        write_json({"version": OUTPUT_VERSION, **report.to_dict()})
    else:
        sys.stdout.write(
            f"journal prune: {report.segments_deleted} segments deleted, "
            f"{report.segments_kept} kept, {report.sweepers_gone} sweepers gone, "
            f"{report.markers_written} pruned markers written, {report.anchors_deleted} etcd "
            f"anchors deleted, {report.errors} errors\n"
        )
    return exitcodes.PARTIAL_FAILURE if report.errors else exitcodes.OK


async def run(args: argparse.Namespace) -> int:
    """Verify, show or prune; see the module docstring."""
    resolve(args, _READ_OPTIONS)
    configure_logging(args.log_level)
    if args.action == "prune":
        return await prune(args)
    if args.action == "show" and args.key is None:
        raise ConfigError("gcd journal show needs --key KEY (the object key to explain)")
    read = await _read(args)
    if args.action == "show":
        stories = find_key(read, args.key)
        if args.json:
            write_json(
                {
                    "version": OUTPUT_VERSION,
                    "key": args.key,
                    "attempts": [story.to_dict() for story in stories],
                }
            )
        else:
            _write_show(args.key, stories)
        return exitcodes.OK if stories else exitcodes.PARTIAL_FAILURE
    if not read.files and not read.audit_anchors:
        where = args.journal_dir or f"s3://{args.bucket}/{args.journal_prefix}"
        raise ConfigError(
            f"no journal segments (journal-*.jsonl) in {where}: nothing to "
            "verify; is --journal-dir (or --journal-prefix) right?"
        )
    report, notes = await verify(args, read)
    code = _verify_code(report, notes)
    if args.json:
        write_json(
            {
                "version": OUTPUT_VERSION,
                "ok": code == exitcodes.OK,
                "verdict": _verdict(report, notes),
                "notes": notes,
                **report.to_dict(),
            }
        )
    else:
        _write_verify(report, notes)
    return code
