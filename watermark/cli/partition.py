"""`watermark partition register|deregister NAME... | list | show NAME`: the records.

`register` creates each record (M(p) = cluster epoch - 1) and leaves an existing one
unchanged. `deregister` deletes records, once their data is gone: a live owner's only
with `--force`, which revokes it first (`watermark.api.owners`); `--name-hex` names
records whose names are not valid partition names by their bytes, as `gcd status`
prints them. `list` prints every record in partition order (a malformed one says so),
`show` one. Names, owners and errors come from etcd: the text output escapes what a
terminal would obey (`l0gc.display.printable`). `partition repair` is
`watermark.cli.repair`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from l0gc.contract.kv import KV
from l0gc.contract.namespace import partition_order
from l0gc.contract.record import PartitionRecord
from l0gc.display import printable
from l0gc.errors import ConfigError, L0gcError, PartitionNotRegistered
from l0gc.etcd.store import WatermarkStore
from l0gc.options import Option, boolean
from watermark.api.owners import FORCE_OPTIONS, deregister
from watermark.cli.output import ADMIN_OPTIONS

__all__ = [
    "DEREGISTER_OPTIONS",
    "deregister_partitions",
    "list_partitions",
    "register",
    "show",
    "write_deregistered",
    "write_records",
]

DEREGISTER_OPTIONS: tuple[Option, ...] = (
    *ADMIN_OPTIONS,
    *FORCE_OPTIONS,
    Option(
        "--name-hex",
        boolean,
        False,
        "the NAMEs are the hex bytes of records whose names are not valid partition "
        "names (control characters, bytes that are not UTF-8), as `gcd status` prints "
        "them; such a record has no owner to check",
        switch=True,
    ),
)


def _record(record: PartitionRecord) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(record.encode())
    return doc


async def register(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    """`watermark partition register NAME...`."""
    return {"partitions": [_record(await store.register_partition(n)) for n in args.names]}


async def deregister_partitions(
    args: argparse.Namespace, store: WatermarkStore, kv: KV
) -> dict[str, Any]:
    """Delete the records; a live owner's only with --force, revoked first (`owners`)."""
    if args.name_hex:
        raw = [_hex_name(name) for name in args.names]
        removed = [
            name
            for name, data in zip(args.names, raw, strict=True)
            if await store.deregister_raw(data)
        ]
        return {"deregistered": removed, "absent": [n for n in args.names if n not in removed]}
    deleted = await deregister(
        store, args.names, force=args.force, revoke_wait_s=args.revoke_wait, reason=args.reason
    )
    return {"deregistered": deleted, "absent": [n for n in args.names if n not in deleted]}


def _hex_name(text_: str) -> bytes:
    try:
        return bytes.fromhex(text_)
    except ValueError:
        raise ConfigError(
            f"--name-hex: {text_!r} is not hex; give the bytes of the record's name after "
            "{ns}/partitions/ as `gcd status` prints them (e.g. 6f72646572730a)"
        ) from None


async def list_partitions(
    args: argparse.Namespace, store: WatermarkStore, kv: KV
) -> dict[str, Any]:
    """`watermark partition list`."""
    records = await store.list_partitions()
    return {
        "partitions": [
            {"partition": name, "error": str(found)}
            if isinstance(found, L0gcError)
            else _record(found)
            for name, found in sorted(records.items(), key=lambda item: partition_order(item[0]))
        ]
    }


async def show(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    """`watermark partition show NAME`."""
    record = await store.get_partition(args.name)
    if record is None:
        raise PartitionNotRegistered(args.name)
    return _record(record)


def write_deregistered(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """One line per name: deregistered, or not registered."""
    for name in result["deregistered"]:
        sys.stdout.write(f"deregistered {printable(name)}\n")
    for name in result["absent"]:
        sys.stdout.write(f"not registered {printable(name)}\n")


def write_records(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """One line per record (register, list, show)."""
    docs = result.get("partitions", [result])
    for doc in docs:
        name = printable(doc["partition"])
        if "error" in doc:
            sys.stdout.write(f"{name}  MALFORMED: {printable(doc['error'])}\n")
            continue
        low, high = doc["window"]
        window = "empty" if low is None else f"[{low}, {high}]"
        owner = "none" if doc["owner"] is None else printable(doc["owner"])
        sys.stdout.write(
            f"{name}  M(p)={doc['watermark']}  window={window}  "
            f"created_epoch={doc['created_epoch']}  owner={owner}"
            f"  owner_epoch={doc['owner_epoch']}\n"
        )
