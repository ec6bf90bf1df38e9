"""`gcd restore`: bring back objects l0gc deleted within its undo window.

Design notes: docs/internals/cli.md, `gcd.cli.restore`.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from gcd.cli.options import (
    JOURNAL_READ_OPTIONS,
    QUIET_LOG_LEVEL,
    S3_OPTIONS,
    SWEEP_OPTIONS,
    resolve,
)
from gcd.cli.output import write_json
from gcd.cli.storage import AZURE_OPTIONS, GCS_OPTIONS, store_settings
from gcd.journal.check import check_anchors, check_records, etcd_anchors
from gcd.journal.places import read_journal_places, unread_shipped
from gcd.journal.records import JournalRead, Record
from gcd.service.reader import open_reader
from gcd.service.runtime import MAX_SEGMENT_READ
from gcd.undo.restore import (
    KeyResult,
    RestoreLog,
    RestoreOutcome,
    Selection,
    deletions_in,
    repair_steps,
    restore,
    select,
)
from gcd.undo.trust import trusted_records
from l0gc import exitcodes
from l0gc.contract.kv import KV
from l0gc.display import printable
from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings, add_etcd_arguments
from l0gc.logs import configure_logging
from l0gc.options import Option, add_config_option, add_options, text

__all__ = ["OUTPUT_VERSION", "RESTORE_OPTIONS", "add_arguments", "run"]

OUTPUT_VERSION = 1

RESTORE_OPTIONS: tuple[Option, ...] = (
    *S3_OPTIONS,
    *AZURE_OPTIONS,
    *GCS_OPTIONS,
    *JOURNAL_READ_OPTIONS,
    Option(
        "--since",
        text,
        None,
        "restore deletions made at or after this time (ISO 8601, "
        "e.g. 2026-11-22T02:00:00Z; default: no lower bound)",
        "TIME",
    ),
    Option(
        "--until",
        text,
        None,
        "restore deletions made at or before this time (ISO 8601; default: no upper bound)",
        "TIME",
    ),
    Option(
        "--round",
        text,
        None,
        "restore the deletions of these rounds (ids as `gcd sweep "
        "--json` prints them, comma-separated; default: every round)",
        "ID",
    ),
    *(o for o in SWEEP_OPTIONS if o.flag in {"--dry-run", "--json"}),
    QUIET_LOG_LEVEL,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`gcd restore` options."""
    add_config_option(parser)
    add_options(parser, RESTORE_OPTIONS, "journal, selection and output")
    parser.add_argument(
        "--partition",
        action="append",
        metavar="P",
        default=None,
        help="the partition whose M(p) was wrong: named in the repair steps "
        "(repeatable; it does not select deletions: use --since)",
    )
    parser.add_argument(
        "--key",
        action="append",
        metavar="K",
        default=None,
        help="restore this object key (repeatable; a key the journal never "
        "deleted is reported as such; default: every selected key)",
    )
    add_etcd_arguments(parser)


def _time(value: str | None, flag: str) -> float | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError as exc:
        raise ConfigError(
            f"{flag} {value!r} is not an ISO 8601 time; give one such as 2026-11-22T02:00:00Z"
        ) from exc


async def _verified(
    read: JournalRead, kv: KV, settings: EtcdSettings, bucket: str, *, from_prefix: bool
) -> tuple[list[Record], list[str]]:
    """The records that verify (`gcd.undo.trust`), and why the rest do not: the
    chain, the ends anchored in etcd (and in the audit prefix when read from there)."""
    report = check_records(read)
    if from_prefix:
        check_anchors(read, read.audit_anchors, report, where="the audit prefix", require_all=True)
    anchors = await etcd_anchors(kv, settings.namespace, settings.endpoints, report)
    check_anchors(
        read, anchors, report, where="etcd", shipped=read.audit_anchors if from_prefix else None
    )
    return trusted_records(read, report, set(anchors), namespace=settings.namespace, bucket=bucket)


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty() and (done == total or done % 100 == 0):
        sys.stderr.write(f"\rrestore: checked {done:,}/{total:,} keys")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


async def run(args: argparse.Namespace) -> int:
    """Restore; see the module docstring."""
    resolve(args, RESTORE_OPTIONS, extra_known={"partition", "key", "since", "until", "round"})
    configure_logging(args.log_level)
    selection = Selection(
        since=_time(args.since, "--since"),
        until=_time(args.until, "--until"),
        rounds=frozenset(part for part in (args.round or "").split(",") if part),
        partitions=frozenset(args.partition or ()),
        keys=tuple(args.key or ()),
    )
    store_at = store_settings(
        args, no_bucket="no bucket given: pass --bucket NAME or set L0GC_BUCKET"
    )
    if args.journal_dir is None and args.journal_prefix is None:
        raise ConfigError(
            "give the journal: --journal-dir DIR, or --journal-prefix P (the "
            "segments shipped to the bucket)"
        )
    settings = EtcdSettings.from_args(args)
    restore_id = uuid.uuid4().hex[:8]
    async with open_reader(settings, store_at) as reader:
        store = reader.bucket()
        kv, watermarks = reader.etcd()
        if await watermarks.get_paused() is None and not args.dry_run:
            sys.stderr.write(
                f"gcd restore: GC is not paused for {settings.namespace}: a restored "
                "key at or below M would be deleted again; run `gcd pause --reason "
                '"restore"` first\n'
            )
            return exitcodes.USAGE
        read = await read_journal_places(
            args.journal_dir, store, args.journal_prefix, max_bytes=MAX_SEGMENT_READ
        )
        missing = None if args.journal_prefix is not None else unread_shipped(read)
        if missing is not None:
            sys.stderr.write(f"gcd restore: {missing}\n")
        if not read.records:
            raise ConfigError(
                "no journal records found: is --journal-dir / --journal-prefix "
                "the sweepers' journal? (give both when the sweepers ship "
                "their segments)"
            )
        bucket = store_at.target("").bucket
        trusted, untrusted = await _verified(
            read, kv, settings, bucket, from_prefix=args.journal_prefix is not None
        )
        for line in untrusted:
            sys.stderr.write(f"gcd restore: {line}; run `gcd journal verify`\n")
        chosen = select(deletions_in(JournalRead(records=trusted)), selection)
        path = None
        if args.journal_dir is not None and not args.dry_run:
            path = Path(args.journal_dir.split(",")[0]) / f"restore-{restore_id}.jsonl"
        log = RestoreLog(path)
        try:
            results = await restore(
                store,
                chosen,
                wanted=selection.keys,
                dry_run=args.dry_run,
                log=log,
                progress=_progress,
            )
        finally:
            log.close()
        if args.journal_dir is None and log.lines:
            name = f"{args.journal_prefix.strip('/')}/restore-{restore_id}.jsonl"
            await store.put_object(name, ("\n".join(log.lines) + "\n").encode(), if_absent=True)
    steps = repair_steps(results, chosen, sorted(selection.partitions))
    _write(results, steps, json_out=args.json, dry_run=args.dry_run)
    failed = untrusted or any(
        result.outcome in {RestoreOutcome.FAILED, RestoreOutcome.REFUSED} for result in results
    )
    return exitcodes.PARTIAL_FAILURE if failed else exitcodes.OK


def _write(results: list[KeyResult], steps: list[str], *, json_out: bool, dry_run: bool) -> None:
    counts = {outcome.value: 0 for outcome in RestoreOutcome}
    for result in results:
        counts[result.outcome.value] += 1
    if json_out:
        doc: dict[str, Any] = {
            "version": OUTPUT_VERSION,
            "dry_run": dry_run,
            **{name.replace(" ", "_"): count for name, count in counts.items()},
            "keys": [result.to_dict() for result in results],
            "steps": steps,
        }
        write_json(doc)
        return
    for result in results:
        line = f"{result.outcome.value:<18} {printable(result.key)}"
        if result.version_id is not None:
            line += f"  (version {result.version_id})"
        if result.detail is not None:
            line += f"  ({result.detail})"
        sys.stdout.write(line + "\n")
    said = ", ".join(f"{count} {name}" for name, count in counts.items() if count)
    head = "gcd restore (dry run):" if dry_run else "gcd restore:"
    sys.stdout.write(f"{head} {said or 'nothing selected'}\n")
    if steps:
        sys.stdout.write("to keep them, lower the wrong M(p) below them, then resume GC:\n")
        sys.stdout.writelines(f"  {step}\n" for step in steps)
