"""`watermark epoch get` and `watermark epoch advance [--expected N]`: the cluster epoch.

`get` prints it; `advance` moves it by exactly 1 in one compare-and-swap (with
`--expected N`, only from N: a script that read the epoch cannot skip one that another
advance took meanwhile; a conflict is exit 1).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from l0gc.contract.kv import KV
from l0gc.etcd.store import WatermarkStore
from l0gc.options import Option, integer
from watermark.cli.output import ADMIN_OPTIONS

__all__ = ["ADVANCE_OPTIONS", "GET_OPTIONS", "advance", "get", "write_text"]

GET_OPTIONS = ADMIN_OPTIONS
ADVANCE_OPTIONS: tuple[Option, ...] = (
    *ADMIN_OPTIONS,
    Option(
        "--expected",
        integer(0),
        None,
        "fail unless the epoch is N before advancing (default: no check)",
        "N",
    ),
)


async def get(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    """`watermark epoch get`."""
    return {"epoch": await store.get_cluster_epoch()}


async def advance(args: argparse.Namespace, store: WatermarkStore, kv: KV) -> dict[str, Any]:
    """`watermark epoch advance`."""
    epoch = await store.advance_cluster_epoch(args.expected)
    return {"epoch": epoch, "previous": epoch - 1}


def write_text(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The epoch, alone on its line."""
    sys.stdout.write(f"{result['epoch']}\n")
