"""The two hot S3 answers, read as a tree and by the scanner: CPU per key and collections.

`gcd.storage.s3.wire` reads a ListObjectsV2 or DeleteObjects answer with a scanner (a few
regular expressions, no tree) and hands any other shape to its tree reader (ElementTree).
This measures both on the same bodies, in this process, no I/O:

- a 1,000-key ListObjectsV2 page as AWS writes it (EncodingType=url, quoted ETag,
  checksum elements; ~335 bytes a key), and one as moto writes it (pretty-printed,
  an Owner per key);
- a verbose 1,000-key DeleteObjects answer (unversioned: a key per entry; versioned: a
  version id per entry).

For each body and side, one run reads `--pages` pages in a row, keeping each page's
result until the next is read (as the sweeper holds a page while it works on it), over a
heap of `--heap` other live container objects that the cyclic collector has to walk in a
full collection (the sweeper's own state; the CLI freezes the modules' objects). Reported,
median of `--runs` runs (sides alternate, their order rotating): CPU microseconds per key
with the collector on (`time.process_time`), the same with it off (the parse alone), the
collector's own CPU time per key (`gc.callbacks`, start to stop), and the collections per page
in each generation. Also the CPU of building 1,000 `ObjectInfo`s, part of both sides.

With `--rclone PREFIXES`, also the whole client: `S3ObjectStore.list_page` (aiobotocore,
signing, aiohttp, the reader) listing PREFIXES x 2,000 keys of `rclone serve s3
:memory:` (a process of its own, `l0lab.testing.local_rclone`; its CPU is not counted)
in 1,000-key pages, the scanner against the tree reader (the scanner made to decline),
sides alternating; the process's CPU per key listed, the collector's time, and the
collections per page, with the imported modules frozen (`gc.freeze()`) as `gcd` runs.

    .venv/bin/python -m bench.wire_scan [--runs 7] [--pages 50] [--heap 200000]
        [--rclone 20] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gcd.storage.objectstore import ObjectInfo
from gcd.storage.s3 import wire

_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n'


def aws_listing(keys: int) -> bytes:
    """A truncated ListObjectsV2 page as AWS writes it."""
    head = (
        f'{_DECLARATION}<ListBucketResult xmlns="{_NS}"><Name>bucket</Name>'
        "<Prefix>level_zero/data/417/</Prefix>"
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
        f"<KeyCount>{keys}</KeyCount><MaxKeys>1000</MaxKeys><EncodingType>url</EncodingType>"
        "<IsTruncated>true</IsTruncated>"
    )
    entries = (
        f"<Contents><Key>level_zero/data/417/{i:018d}/seg-{i}.log</Key>"
        f"<LastModified>2026-11-22T03:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z"
        "</LastModified><ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag>"
        "<ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm>"
        f"<ChecksumType>FULL_OBJECT</ChecksumType><Size>{i * 37}</Size>"
        "<StorageClass>STANDARD</StorageClass></Contents>"
        for i in range(keys)
    )
    return (head + "".join(entries) + "</ListBucketResult>").encode()


def moto_listing(keys: int) -> bytes:
    """A last ListObjectsV2 page as moto writes it (indented, an Owner per key)."""
    head = (
        f'{_DECLARATION}<ListBucketResult xmlns="{_NS}">\n  <Name>bucket</Name>\n'
        "  <Prefix>level_zero/data/417/</Prefix>\n  <MaxKeys>1000</MaxKeys>\n"
        f"  <KeyCount>{keys}</KeyCount>\n  <EncodingType>url</EncodingType>\n"
        "  <IsTruncated>false</IsTruncated>\n"
    )
    owner = "75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a"
    entries = (
        f"  <Contents>\n    <Key>level_zero/data/417/{i:018d}/seg-{i}.log</Key>\n"
        f"    <LastModified>2026-11-22T03:{i // 60 % 60:02d}:{i % 60:02d}.000Z"
        "</LastModified>\n    <ETag>&#34;d41d8cd98f00b204e9800998ecf8427e&#34;</ETag>\n"
        f"    <Size>{i * 37}</Size>\n    <StorageClass>STANDARD</StorageClass>\n"
        f"    <Owner>\n      <ID>{owner}</ID>\n      <DisplayName>webfile</DisplayName>\n"
        "    </Owner>\n  </Contents>\n"
        for i in range(keys)
    )
    return (head + "".join(entries) + "</ListBucketResult>").encode()


def delete_answer(keys: int, *, versioned: bool) -> bytes:
    """A verbose DeleteObjects answer naming every key deleted."""
    parts = [f'{_DECLARATION}<DeleteResult xmlns="{_NS}">']
    for i in range(keys):
        version = f"<VersionId>3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY+MTRCxf3vjVBH40N{i:06d}</VersionId>"
        parts.append(
            f"<Deleted><Key>level_zero/data/417/{i:018d}/seg-{i}.log</Key>"
            f"{version if versioned else ''}</Deleted>"
        )
    parts.append("</DeleteResult>")
    return "".join(parts).encode()


class _Collections:
    """Collections per generation and the collector's time, from `gc.callbacks`."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started
            self.counts[info["generation"]] += 1


def _run(read: Callable[[bytes], Any], body: bytes, pages: int, *, collect: bool) -> dict[str, Any]:
    """One run: `pages` reads of `body`, each result held until the next read."""
    gc.collect()
    held: Any = None
    watch = _Collections()
    gc.callbacks.append(watch)
    if not collect:
        gc.disable()
    try:
        start = time.process_time()
        for _ in range(pages):
            held = read(body)
        cpu = time.process_time() - start
    finally:
        gc.enable()
        gc.callbacks.remove(watch)
    del held
    return {"cpu_s": cpu, "gc_s": watch.seconds, "collections": watch.counts}


def _object_infos(keys: int) -> float:
    """CPU seconds of building `keys` ObjectInfos (what both sides do per key)."""
    gc.disable()
    try:
        start = time.process_time()
        for i in range(keys):
            ObjectInfo("k", i, 1.0)
        return time.process_time() - start
    finally:
        gc.enable()


def measure(*, runs: int, pages: int, heap: int, keys: int = 1000) -> dict[str, Any]:
    """Every body, both sides, median of `runs`; figures per key and per page."""
    background = [{"i": i} for i in range(heap)]  # live objects a full collection walks
    bodies: dict[str, tuple[bytes, Callable[[bytes], Any], Callable[[bytes], Any]]] = {
        "ListObjectsV2, AWS": (aws_listing(keys), wire._tree_listing, wire.read_listing),
        "ListObjectsV2, moto": (moto_listing(keys), wire._tree_listing, wire.read_listing),
        "DeleteObjects, verbose": (
            delete_answer(keys, versioned=False),
            wire._tree_delete_result,
            wire.read_delete_result,
        ),
        "DeleteObjects, verbose, versions": (
            delete_answer(keys, versioned=True),
            wire._tree_delete_result,
            wire.read_delete_result,
        ),
    }
    assert wire._scan_listing(bodies["ListObjectsV2, AWS"][0]) is not None
    assert wire._scan_listing(bodies["ListObjectsV2, moto"][0]) is not None
    assert wire._scan_delete_result(bodies["DeleteObjects, verbose"][0]) is not None
    rows = []
    for name, (body, tree, scanner) in bodies.items():
        assert tree(body) == scanner(body)
        sides = [("tree", tree), ("scanner", scanner)]
        samples: dict[str, dict[str, list[Any]]] = {
            side: {"on": [], "off": [], "gc": [], "collections": []} for side, _ in sides
        }
        for run in range(runs):
            for side, read in sides[run % 2 :] + sides[: run % 2]:
                on = _run(read, body, pages, collect=True)
                off = _run(read, body, pages, collect=False)
                samples[side]["on"].append(on["cpu_s"])
                samples[side]["off"].append(off["cpu_s"])
                samples[side]["gc"].append(on["gc_s"])
                samples[side]["collections"].append(on["collections"])
        for side, _ in sides:
            got = samples[side]
            per_key = 1e6 / (pages * keys)
            rows.append(
                {
                    "answer": name,
                    "side": side,
                    "bytes_per_key": round(len(body) / keys),
                    "us_per_key": statistics.median(got["on"]) * per_key,
                    "us_per_key_gc_off": statistics.median(got["off"]) * per_key,
                    "gc_us_per_key": statistics.median(got["gc"]) * per_key,
                    "collections_per_page": [
                        statistics.median(c[g] for c in got["collections"]) / pages
                        for g in range(3)
                    ],
                    "runs": dict(got),
                }
            )
    infos = statistics.median(_object_infos(keys) for _ in range(runs)) * 1e6 / keys
    del background
    return {
        "keys_per_page": keys,
        "pages": pages,
        "runs": runs,
        "heap_objects": heap,
        "gc_threshold": gc.get_threshold(),
        "python": sys.version.split()[0],
        "object_info_us_per_key": infos,
        "rows": rows,
    }


_PER_PREFIX = 2000


async def _list_all(store: Any, prefixes: list[str]) -> int:
    """Every key under `prefixes`, page by page; how many."""
    listed = 0
    for prefix in prefixes:
        token = None
        while True:
            page = await store.list_page(prefix, continuation_token=token)
            listed += len(page.objects)
            token = page.next_token
            if token is None:
                break
    return listed


def _seed(client: Any, bucket: str, keys: list[str]) -> None:
    """PUT every key (a one-byte object), 16 at a time, through boto3 `client`."""
    client.create_bucket(Bucket=bucket)
    with ThreadPoolExecutor(16) as pool:
        for _ in pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=b"x"), keys):
            pass


def client_listing(*, prefixes: int, runs: int) -> dict[str, Any]:
    """The whole client listing `prefixes` x 2,000 keys of rclone, scanner vs tree."""
    from gcd.storage.s3.client import S3ObjectStore  # noqa: PLC0415 - with --rclone only
    from gcd.storage.s3.settings import S3Settings  # noqa: PLC0415
    from l0lab.testing.local_rclone import KEY, LocalRclone  # noqa: PLC0415

    names = [f"level_zero/data/{p:03d}/" for p in range(prefixes)]
    keys = [f"{name}{i:018d}/seg-{i}.log" for name in names for i in range(_PER_PREFIX)]
    scan = wire._scan_listing
    samples: dict[str, dict[str, list[Any]]] = {
        side: {"cpu": [], "gc": [], "collections": []} for side in ("tree", "scanner")
    }

    async def measure_sides(store: Any) -> None:
        await _list_all(store, names[:1])  # warm-up: connections, caches
        gc.collect()
        gc.freeze()
        try:
            for run in range(runs):
                for side in ("tree", "scanner")[:: 1 if run % 2 else -1]:
                    wire._scan_listing = scan if side == "scanner" else lambda _body: None
                    watch = _Collections()
                    gc.callbacks.append(watch)
                    start = time.process_time()
                    try:
                        listed = await _list_all(store, names)
                    finally:
                        cpu = time.process_time() - start
                        gc.callbacks.remove(watch)
                        wire._scan_listing = scan
                    assert listed == len(keys)
                    pages = listed / 1000
                    samples[side]["cpu"].append(cpu / listed)
                    samples[side]["gc"].append(watch.seconds / listed)
                    samples[side]["collections"].append([c / pages for c in watch.counts])
        finally:
            gc.unfreeze()

    with LocalRclone() as server:
        _seed(server.client(), "bench", keys)
        os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = KEY
        settings = S3Settings("bench", server.endpoint_url, "us-east-1")

        async def main() -> None:
            async with S3ObjectStore.open(settings) as store:
                await measure_sides(store)

        asyncio.run(main())
    return {
        "keys": len(keys),
        "runs": runs,
        "rows": [
            {
                "side": side,
                "us_per_key": statistics.median(got["cpu"]) * 1e6,
                "gc_us_per_key": statistics.median(got["gc"]) * 1e6,
                "collections_per_page": [
                    statistics.median(c[g] for c in got["collections"]) for g in range(3)
                ],
                "runs": dict(got),
            }
            for side, got in samples.items()
        ],
    }


def markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown table."""
    about = (
        f"{result['keys_per_page']:,}-key answers, {result['pages']} pages a run, median of "
        f"{result['runs']} runs, {result['heap_objects']:,} other live objects, "
        f"gc thresholds {result['gc_threshold']}, Python {result['python']}"
    )
    columns = (
        "| answer | side | bytes/key | CPU us/key | CPU us/key, gc off | gc us/key "
        "| collections per page (gen 0 / 1 / 2) |"
    )
    lines = [about, "", columns, "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        gen = " / ".join(f"{c:.2f}" for c in row["collections_per_page"])
        lines.append(
            f"| {row['answer']} | {row['side']} | {row['bytes_per_key']} "
            f"| {row['us_per_key']:.2f} | {row['us_per_key_gc_off']:.2f} "
            f"| {row['gc_us_per_key']:.2f} | {gen} |"
        )
    infos = result["object_info_us_per_key"]
    lines += ["", f"Building an `ObjectInfo` (both ListObjectsV2 sides, per key): {infos:.2f} us."]
    client = result.get("client")
    if client is not None:
        title = (
            f"The whole client, `list_page` of {client['keys']:,} keys of rclone serve s3 "
            f"(1,000-key pages), median of {client['runs']} runs, modules frozen:"
        )
        lines += [
            "",
            title,
            "",
            "| reader | client CPU us/key | gc us/key | collections per page (gen 0 / 1 / 2) |",
            "|---|---|---|---|",
        ]
        for row in client["rows"]:
            gen = " / ".join(f"{c:.2f}" for c in row["collections_per_page"])
            lines.append(
                f"| {row['side']} | {row['us_per_key']:.2f} | {row['gc_us_per_key']:.2f} | {gen} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table (and write JSON with `--json-out`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--heap", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rclone", type=int, default=0, metavar="PREFIXES")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = measure(runs=args.runs, pages=args.pages, heap=args.heap, keys=args.keys)
    if args.rclone:
        result["client"] = client_listing(prefixes=args.rclone, runs=args.runs)
    sys.stdout.write(markdown(result) + "\n")
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
