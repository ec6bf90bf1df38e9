"""Bind a test's namespace to its bucket and root, as an operator does once per cluster.

Every sweeping command refuses to delete for an unbound namespace (`gcd.sweep.binding`), so
tests that sweep with etcd bind first, through the same code `watermark namespace bind`
runs:

    bind_sync(etcd_server.endpoint, namespace, s3_server.endpoint_url, bucket)
"""

from __future__ import annotations

import asyncio

from gcd.rules.layout import DEFAULT_ROOT
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from gcd.sweep.binding import BindOutcome, bind_namespace
from l0gc.contract.binding import StorageTarget
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore


async def bind(
    etcd_endpoint: str, namespace: str, endpoint_url: str, bucket: str, root: str = DEFAULT_ROOT
) -> BindOutcome:
    """Bind `namespace` to s3://bucket/root at `endpoint_url`."""
    kv = await open_kv(EtcdSettings(endpoints=(etcd_endpoint,), namespace=namespace))
    target = StorageTarget(bucket, root, endpoint_url)
    settings = S3Settings(bucket=bucket, endpoint_url=endpoint_url, region="us-east-1")
    try:
        async with S3ObjectStore.open(settings) as objects:
            return await bind_namespace(WatermarkStore(kv, namespace), objects, target)
    finally:
        await kv.close()


def bind_sync(
    etcd_endpoint: str, namespace: str, endpoint_url: str, bucket: str, root: str = DEFAULT_ROOT
) -> BindOutcome:
    """`bind` for sync tests and fixtures."""
    return asyncio.run(bind(etcd_endpoint, namespace, endpoint_url, bucket, root))
