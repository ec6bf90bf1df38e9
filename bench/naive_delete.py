"""The naive baseline: list every key under a prefix with boto3, then delete them one by one.

This is the script a user writes in five minutes (and what many cron jobs do):

    .venv/bin/python -m bench.naive_delete --endpoint-url URL --bucket B --prefix P

Prints {"deleted": N, "list_requests": L, "delete_requests": D} as JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys

import boto3


def main() -> int:
    """List, then DeleteObject per key; no batching, no concurrency."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint-url", required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", required=True)
    args = parser.parse_args()
    client = boto3.client("s3", endpoint_url=args.endpoint_url)
    keys: list[str] = []
    pages = 0
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=args.bucket, Prefix=args.prefix
    ):
        pages += 1
        keys.extend(item["Key"] for item in page.get("Contents", ()))
    for key in keys:
        client.delete_object(Bucket=args.bucket, Key=key)
    result = {"deleted": len(keys), "list_requests": pages, "delete_requests": len(keys)}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
