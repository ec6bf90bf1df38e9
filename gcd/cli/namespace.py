"""`gcd namespace` (also `watermark namespace`): bind a namespace to its bucket and root.

Design notes: docs/internals/cli.md, `gcd.cli.namespace`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from gcd.cli.options import LAYOUT_OPTIONS, QUIET_LOG_LEVEL, S3_OPTIONS
from gcd.cli.output import write_json
from gcd.cli.reading import open_etcd
from gcd.cli.storage import AZURE_OPTIONS, GCS_OPTIONS, access_of, store_settings
from gcd.service import backup
from gcd.storage.backend import StoreSettings
from gcd.storage.objectstore import BucketStore
from gcd.storage.registry import backend, open_store, preflight_store
from gcd.sweep.binding import (
    BindingConflict,
    bind_namespace,
    read_ancestor_claims,
    read_claim_object,
)
from gcd.sweep.claims import bound_target, repair_claims
from l0gc import exitcodes
from l0gc.contract.binding import (
    Binding,
    StorageTarget,
    check_ancestor_claims,
    check_binding,
    claim_key,
)
from l0gc.display import printable
from l0gc.errors import ConfigError, InvalidRecord
from l0gc.etcd.settings import add_etcd_arguments
from l0gc.etcd.store import WatermarkStore
from l0gc.options import Option, add_config_option, add_options, boolean

__all__ = ["OUTPUT_VERSION", "add_arguments", "run"]

OUTPUT_VERSION = 1
_ROOT = next(option for option in LAYOUT_OPTIONS if option.flag == "--root")
OPTIONS: tuple[Option, ...] = (
    *S3_OPTIONS,
    *AZURE_OPTIONS,
    *GCS_OPTIONS,
    _ROOT,
    Option(
        "--replace",
        boolean,
        False,
        "bind: move an existing binding of this namespace "
        "(never takes a root claimed by another namespace)",
        switch=True,
    ),
    Option(
        "--force",
        boolean,
        False,
        "repair-claims: also remove a valid claim of another namespace with --remove-claim",
        switch=True,
    ),
    Option(
        "--json", boolean, False, "print the outcome as one JSON document on stdout", switch=True
    ),
    QUIET_LOG_LEVEL,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`namespace bind|show` options."""
    parser.add_argument(
        "action",
        choices=["bind", "show", "repair-claims", "export", "import"],
        help="bind, show the binding, repair its claims in the bucket, or "
        "export / import the namespace's state (a backup file)",
    )
    parser.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="export, import: the backup file ('-' for stdout on export)",
    )
    parser.add_argument(
        "--remove-claim",
        action="append",
        default=[],
        metavar="KEY",
        help="repair-claims: delete this claim object below the root "
        "(repeatable); a valid claim of another namespace needs --force",
    )
    add_config_option(parser)
    add_options(parser, OPTIONS, "storage and output")
    add_etcd_arguments(parser)


def _open(
    target: StorageTarget, args: argparse.Namespace
) -> contextlib.AbstractAsyncContextManager[BucketStore]:
    """`open_store` on `target`."""
    return open_store(_settings(target, args))


def _settings(target: StorageTarget, args: argparse.Namespace) -> StoreSettings:
    """How to reach `target`, with this command's credential flags (`--region`,
    `--azure-connection-string-file`, `--gcs-credentials-file`, `--gcs-anonymous`) or
    the store's default chain."""
    return backend(target.kind).from_target(target, access_of(args))


async def _bind(args: argparse.Namespace, store: WatermarkStore) -> tuple[int, dict[str, Any]]:
    target = store_settings(args).target(args.root)
    # gcd sweep's preflight: what only the operator can fix (credentials, bucket,
    # endpoint) is one line and exit 2 here too, not a storage error's exit 1
    await preflight_store(_settings(target, args), target.root.rstrip("/") + "/")
    async with _open(target, args) as objects:
        outcome = await bind_namespace(store, objects, target, replace=bool(args.replace))
    doc: dict[str, Any] = {
        "namespace": store.namespace,
        "bound": True,
        "changed": outcome.changed,
        "binding": _binding_doc(outcome.binding),
    }
    if outcome.replaced is not None:
        doc["replaced"] = _binding_doc(outcome.replaced)
    return exitcodes.OK, doc


async def _export(args: argparse.Namespace, store: WatermarkStore) -> tuple[int, dict[str, Any]]:
    if not args.file:
        raise ConfigError("export needs a FILE to write (or '-' for stdout)")
    doc = await backup.export_namespace(store)
    if args.file == "-":
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        backup.write_export(Path(args.file), doc)
    return exitcodes.OK, {
        "namespace": store.namespace,
        "exported": len(doc["keys"]),
        "revision": doc["revision"],
        "file": args.file,
    }


async def _import(args: argparse.Namespace, store: WatermarkStore) -> tuple[int, dict[str, Any]]:
    if not args.file:
        raise ConfigError("import needs the FILE an export wrote")
    pairs = backup.read_export(Path(args.file))
    written = await backup.import_namespace(store, pairs)
    return exitcodes.OK, {"namespace": store.namespace, "imported": written, "paused": True}


async def _repair_claims(
    args: argparse.Namespace, store: WatermarkStore
) -> tuple[int, dict[str, Any]]:
    binding = await bound_target(store)
    async with _open(binding.target, args) as objects:
        done = await repair_claims(
            binding, objects, remove=list(args.remove_claim), force=bool(args.force)
        )
    return exitcodes.OK, {
        "namespace": store.namespace,
        "bound": True,
        "binding": _binding_doc(binding),
        "claim_key": done.root_claim,
        "claim_rewritten": done.rewritten,
        "previous_claim": done.previous,
        "removed_claims": done.removed,
    }


async def _show(args: argparse.Namespace, store: WatermarkStore) -> tuple[int, dict[str, Any]]:
    raw, _ = await store.get_binding()
    doc: dict[str, Any] = {"namespace": store.namespace, "bound": raw is not None}
    if raw is None:
        doc["problem"] = f"namespace {store.namespace} is not bound to any storage"
        return exitcodes.BLOCKED, doc
    try:
        binding = Binding.decode(raw)
    except InvalidRecord as exc:
        doc["problem"] = f"unreadable binding: {exc}"
        return exitcodes.BLOCKED, doc
    doc["binding"] = _binding_doc(binding)
    async with _open(binding.target, args) as objects:
        claim = await read_claim_object(objects, claim_key(binding.target.root))
        above = await read_ancestor_claims(objects, binding.target.root)
    cluster = await store.cluster_id()  # one key's read: never the partition records
    problem = check_binding(store.namespace, raw, cluster, binding.target, claim) or (
        check_ancestor_claims(store.namespace, cluster, binding.target, above)
    )
    doc["claim_key"] = claim_key(binding.target.root)
    doc["consistent"] = problem is None
    if problem is not None:
        doc["problem"] = problem
    return (exitcodes.OK if problem is None else exitcodes.BLOCKED), doc


def _binding_doc(binding: Binding) -> dict[str, Any]:
    return {
        "target": binding.target.to_doc(),
        "describe": binding.target.describe(),
        "binding_id": binding.binding_id,
        "etcd_cluster_id": binding.cluster_id,
        "bound_at": binding.bound_at,
    }


def _write_text(doc: dict[str, Any]) -> None:
    lines = [f"namespace {doc['namespace']}"]
    if "binding" in doc:
        binding = doc["binding"]
        lines.append(f"  bound to   {binding['describe']}")
        lines.append(
            f"  binding    {binding['binding_id']} (etcd cluster {binding['etcd_cluster_id']})"
        )
    if "changed" in doc:
        lines.append("  bound now" if doc["changed"] else "  already bound: nothing changed")
    if "replaced" in doc:
        lines.append(f"  replaced   {doc['replaced']['describe']}")
    if "claim_rewritten" in doc:
        previous = doc["previous_claim"]
        lines.append(
            f"  claim      {doc['claim_key']}: "
            + (
                "rewritten from the binding (it held "
                f"{'nothing' if previous is None else printable(previous)})"
                if doc["claim_rewritten"]
                else "matches: nothing changed"
            )
        )
        lines.extend(f"  removed    {printable(key)}" for key in doc["removed_claims"])
    elif "claim_key" in doc:
        lines.append(
            f"  claim      {doc['claim_key']}: "
            f"{'matches' if doc['consistent'] else 'DOES NOT MATCH'}"
        )
    if "exported" in doc:
        lines.append(f"  exported   {doc['exported']} keys at revision {doc['revision']}")
    if "imported" in doc:
        lines.append(
            f"  imported   {doc['imported']} keys; paused: check, re-bind with "
            "--replace, then gcd resume (docs/upgrades.md)"
        )
    if "problem" in doc:
        lines.append(f"  refused:   {doc['problem']}")
    sys.stdout.write("\n".join(lines) + "\n")


async def run(args: argparse.Namespace) -> int:
    """Bind or show; see the module docstring."""
    async with open_etcd(args, OPTIONS) as (_, store):
        action = {
            "bind": _bind,
            "show": _show,
            "repair-claims": _repair_claims,
            "export": _export,
            "import": _import,
        }[args.action]
        try:
            code, doc = await action(args, store)
        except (BindingConflict, backup.NamespaceNotEmpty) as exc:
            code, doc = exitcodes.BLOCKED, {"namespace": store.namespace, "problem": str(exc)}
    if args.action == "export" and args.file == "-":
        pass  # stdout holds the export itself
    elif args.json:
        write_json({"version": OUTPUT_VERSION, **doc})
    else:
        _write_text(doc)
    if code == exitcodes.BLOCKED:
        prog = getattr(args, "prog", "gcd namespace")  # `watermark namespace` too
        sys.stderr.write(f"{prog} {args.action}: refused: {doc['problem']}\n")
    return code
