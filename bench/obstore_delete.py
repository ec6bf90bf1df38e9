"""The Rust client side: obstore (object_store) lists a prefix and deletes in batches.

    .venv/bin/python -m bench.obstore_delete --endpoint-url URL --bucket B --prefix P

obstore is a bench-only optional dependency (``pip install '.[bench]'``), never imported
by l0gc itself. Listing pages of 1,000 keys (ListObjectsV2) feed DeleteObjects requests
of 1,000 keys, up to 8 in flight while listing goes on: what a user writing a fast
bulk delete with a native client gets. It knows no epochs: it deletes every key under
the prefix, like s5cmd. Prints {"deleted": N, "delete_requests": D} as JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

import obstore
from obstore.store import S3Store

_BATCH = 1000
_IN_FLIGHT = 8


async def _run(store: S3Store, prefix: str) -> dict[str, int]:
    gate = asyncio.Semaphore(_IN_FLIGHT)
    deleted = requests = 0

    async def delete(paths: list[str]) -> None:
        nonlocal deleted, requests
        try:
            await obstore.delete_async(store, paths)
        finally:
            gate.release()
        deleted += len(paths)
        requests += 1

    async with asyncio.TaskGroup() as group:
        async for chunk in obstore.list(store, prefix, chunk_size=_BATCH):
            await gate.acquire()
            group.create_task(delete([meta["path"] for meta in chunk]))
    return {"deleted": deleted, "delete_requests": requests}


def main() -> int:
    """List, and delete each page of 1,000 keys as one request."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint-url", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args()
    store = S3Store(
        args.bucket,
        endpoint=args.endpoint_url,
        region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )
    result = asyncio.run(_run(store, args.prefix))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    code = main()
    # Leave without tearing down obstore's Rust runtime at interpreter exit: one run in
    # eleven on moto ended in SIGABRT with nothing on stderr (2026-11-26).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
