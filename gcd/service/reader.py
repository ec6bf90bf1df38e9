"""The reading commands' runtime: one etcd client, and the store when one is named.

`gcd status`, `gcd explain`, `gcd journal`, `gcd restore`, `gcd pause`, `gcd namespace`
and the Spark driver read etcd (and the bucket), or write a few keys, and never sweep:
`open_reader` opens what they need once, on ONE etcd connection, and closes it
(`gcd.service.runtime.SweepRuntime` does the same for the commands that sweep).
tests/gcd/service/test_reader.py counts the connections.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gcd.storage.backend import StoreSettings
from gcd.storage.objectstore import BucketStore
from gcd.storage.registry import open_store
from gcd.sweep.binding import BoundSource
from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore

if TYPE_CHECKING:  # aetcd and grpc: only when a command opens etcd (a --safe-epoch round does not)
    from l0gc.etcd.client import EtcdKV

__all__ = ["Reader", "check_namespace_exists", "empty_namespace", "etcd_client", "open_reader"]


def empty_namespace(namespace: str) -> ConfigError:
    """The error for a namespace with nothing stored under it (exit 2)."""
    return ConfigError(
        f"nothing is stored under {namespace}/ in this etcd: is --namespace right? "
        "(check the name, e.g. with etcdctl get --prefix --keys-only /)"
    )


async def check_namespace_exists(kv: EtcdKV, namespace: str) -> None:
    """ConfigError (exit 2) when nothing is stored under the namespace, EtcdUnavailable
    (exit 4) when etcd cannot be reached. One GET when the cluster epoch exists; a read
    of the (then small) namespace otherwise. Writes nothing."""
    await kv.connect()
    if await kv.get(WatermarkStore(kv, namespace).epoch_key) is not None:
        return
    if not (await kv.range_prefix(namespace + "/")).items:
        raise empty_namespace(namespace)


@contextlib.asynccontextmanager
async def etcd_client(
    etcd: EtcdSettings | None, *, check_namespace: bool = False
) -> AsyncIterator[tuple[EtcdKV | None, WatermarkStore | None]]:
    """The process's one etcd client and its watermark store (None, None without etcd)."""
    if etcd is None:
        yield None, None
        return
    kv = await open_kv(etcd, connect=False)
    try:
        if check_namespace:
            await check_namespace_exists(kv, etcd.namespace)
        yield kv, WatermarkStore(kv, etcd.namespace)
    finally:
        await kv.close()


@dataclass(frozen=True, slots=True)
class Reader:
    """What a reading command works with, all on one etcd client."""

    kv: EtcdKV | None
    """The etcd client (None when the command was given no etcd)."""
    watermarks: WatermarkStore | None
    """The namespace's records on `kv`."""
    objects: BucketStore | None = None
    """The open object store, when the command named one."""
    source: BoundSource | None = None
    """M through the namespace's binding to `objects`' bucket and root, when both are named."""

    def bucket(self) -> BucketStore:
        """The open object store (a reader opened with store settings)."""
        if self.objects is None:
            raise ConfigError("this command needs the store: give --bucket (or --store URL)")
        return self.objects

    def etcd(self) -> tuple[EtcdKV, WatermarkStore]:
        """The etcd client and the namespace's records (a reader opened with etcd)."""
        if self.kv is None or self.watermarks is None:
            raise ConfigError("this command needs etcd: give --etcd and --namespace")
        return self.kv, self.watermarks


@contextlib.asynccontextmanager
async def open_reader(
    etcd: EtcdSettings | None,
    store: StoreSettings | None = None,
    root: str | None = None,
    *,
    check_namespace: bool = False,
) -> AsyncIterator[Reader]:
    """Open etcd (and `store`) once for a command that only reads; close both on exit.
    With `check_namespace`, a namespace with nothing stored under it is a ConfigError."""
    async with etcd_client(etcd, check_namespace=check_namespace) as (kv, watermarks):
        if store is None:
            yield Reader(kv, watermarks)
            return
        async with open_store(store) as objects:
            source = None
            if watermarks is not None and root is not None:
                source = BoundSource(watermarks, store.target(root), objects)
            yield Reader(kv, watermarks, objects, source)
