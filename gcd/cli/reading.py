"""The start of the commands that read (or set a key or two of) one etcd namespace:
`gcd status`, `gcd pause`/`resume` and `gcd namespace`."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING

from gcd.cli.options import resolve
from gcd.service.reader import open_reader
from l0gc.etcd.settings import EtcdSettings
from l0gc.etcd.store import WatermarkStore
from l0gc.logs import configure_logging
from l0gc.options import Option

if TYPE_CHECKING:  # aetcd: the reader opens it
    from l0gc.etcd.client import EtcdKV

__all__ = ["open_etcd"]


@contextlib.asynccontextmanager
async def open_etcd(
    args: argparse.Namespace, options: Iterable[Option]
) -> AsyncIterator[tuple[EtcdKV, WatermarkStore]]:
    """The command's `options` (and etcd's) resolved into `args`, its logs configured
    (--log-level), and its etcd client and namespace records, on one connection closed
    at the end."""
    resolve(args, options)
    configure_logging(args.log_level)
    async with open_reader(EtcdSettings.from_args(args)) as reader:
        yield reader.etcd()
