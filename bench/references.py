"""References: what naming object keys costs the writer API, the publisher's memory and
the partition record.

Three figures:

1. Batched commits with references against without. One `watermark serve` (a process of
   its own, real etcd, loopback, no tokens, publish interval 1 s: `bench.writer_api`'s)
   hosts `clients x batch` partitions; each asyncio client owns `batch` of them and
   writes batches: one ``POST /v1/fences`` of `batch` partitions (an L0 object carrying
   them), then one ``POST /v1/commits`` of `batch` entries, each naming 0, 1 or 4 keys
   (75-byte keys of the default layout, the same keys for every entry of a batch: the
   objects the batch wrote), or the batch naming its 4 keys once (the batch's
   ``objects``, referenced by every entry). Sides alternate, their order rotating from run to run;
   between runs (untimed) a reconciler releases every entry (``reconciled`` through the
   last offset, no ``objects``), so each run starts with nothing held. Measured: entries
   per second of wall time, and the serve process's CPU per entry (/proc/PID/stat),
   publishing rounds included (a record holding keys is larger to encode and write).
2. Memory per held entry: `tracemalloc` of one `ReferenceSet` filled through
   `check` + `add` as the publisher does, each key a fresh string (a request's JSON
   decodes one per occurrence), for 1 and 4 keys per entry; per-entry and per-key bytes
   solved from the two.
3. The partition record (the etcd value) holding N references: `PartitionRecord.encode`
   of the record the publisher stored (read from etcd), with N entries of 1 or 4 keys,
   its bytes and its `decode` time; one value read back from etcd as the publisher wrote
   it, to show the two agree; and the worst case the 512 KiB cap allows.

    .venv/bin/python -m bench.references [--quick] [--runs 5] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import sys
import time
import tracemalloc
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import Goal, Report, Scale, Table, machine, median
from bench.writer_api import NAMESPACE, Serve, _cluster_epoch
from l0gc.contract.record import MAX_RECORD_BYTES, PartitionRecord
from l0gc.contract.references import DEFAULT_MAX_REFERENCES, MAX_REFERENCE_BYTES, References
from l0gc.errors import L0gcError, ReferencesFull
from l0gc.etcd.client import EtcdKV
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd
from watermark.core.references import ReferenceSet

NAME = "references"
TITLE = "37. References: batched commits naming keys, memory per held entry, record size"
_SIZES = {  # scale: (clients, entries per batch = partitions per client, batches per client)
    Scale.TOY: (2, 10, 3),
    Scale.QUICK: (4, 100, 10),
    Scale.FULL: (4, 100, 50),
}
_KEYS_PER_ENTRY = (0, 1, 4)
_PER_BATCH = -4
"""The side whose batches name their 4 keys once (the batch's `objects`), not per entry:
one L0 object holding data of every partition of the batch."""
_SIDES = (*_KEYS_PER_ENTRY, _PER_BATCH)
_MEMORY_KEYS = 6_000
"""Keys held in the memory figure: within one partition's 512 KiB (6,990 keys of 75 B)."""
_RECORD_ENTRIES = (1, 100, 1_000, 5_000)


def object_key(epoch: int) -> str:
    """A 75-byte key of the default layout, as a writer names it."""
    name = uuid.uuid4()
    return f"level_zero/data/{name.int % 1000:03d}/{epoch:018d}/{name}"


def _side_name(keys: int) -> str:
    if keys < 0:
        return f"{-keys} keys per batch (named once)"
    return "no objects" if keys == 0 else f"{keys} key{'s' if keys > 1 else ''} per entry"


# -- 1. batched commits --------------------------------------------------------------


class Batches:
    """The clients: each owns `batch` partitions and their next offsets."""

    def __init__(
        self, base: str, clients: int, batch: int, epoch: int, lag: int | None = None
    ) -> None:
        self.base = base
        self.lag = lag
        """With a lag, a reconciler keeps up (timed, on every side): after each batch it
        reports every entry older than `lag` batches lifted (`--reconciler-lag`)."""
        self.epoch = epoch
        self.owned = [[f"bench/{c * batch + i}" for i in range(batch)] for c in range(clients)]
        self.offsets = {p: 0 for group in self.owned for p in group}
        self.body_bytes = 0

    async def _post(self, session: aiohttp.ClientSession, path: str, body: Any) -> Any:
        data = json.dumps(body).encode()
        self.body_bytes += len(data)
        headers = {"Content-Type": "application/json"}
        async with session.post(self.base + path, data=data, headers=headers) as response:
            doc = await response.json()
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status} {doc}")
            return doc

    async def client(
        self, session: aiohttp.ClientSession, client: int, batches: int, keys: int
    ) -> None:
        """`batches` times: fence every partition of the client, commit them all (`keys`
        keys per entry; negative: -`keys` keys named once, by the batch)."""
        mine = self.owned[client]
        for _ in range(batches):
            fences = [{"partition": p, "epoch": self.epoch} for p in mine]
            granted = (await self._post(session, "/v1/fences", {"fences": fences}))["results"]
            objects = [object_key(self.epoch) for _ in range(abs(keys))]
            commits = []
            for partition, result in zip(mine, granted, strict=True):
                if result["status"] != 200:
                    raise RuntimeError(f"fence refused: {result}")
                entry = {"token": result["token"], "offset": self.offsets[partition]}
                if keys > 0:
                    entry["objects"] = objects
                commits.append(entry)
                self.offsets[partition] += 1
            body: dict[str, Any] = {"commits": commits}
            if keys < 0:
                body["objects"] = objects
            done = (await self._post(session, "/v1/commits", body))["results"]
            if any(r["status"] != 200 for r in done):
                raise RuntimeError(f"commit refused: {done[:3]}")
            if self.lag is not None and self.offsets[mine[0]] > self.lag:
                await asyncio.gather(
                    *(
                        self._post(
                            session,
                            f"/v1/partitions/{urllib.parse.quote(p, safe='')}/reconciled",
                            {"offset": self.offsets[p] - 1 - self.lag},
                        )
                        for p in mine
                    )
                )

    async def release(self, session: aiohttp.ClientSession) -> None:
        """The reconciler: every entry so far lifted, every key released (untimed)."""
        for partition, following in self.offsets.items():
            name = urllib.parse.quote(partition, safe="")
            await self._post(
                session, f"/v1/partitions/{name}/reconciled", {"offset": following - 1}
            )


async def _side(serve: Serve, batches: Batches, per_client: int, keys: int) -> dict[str, float]:
    clients = len(batches.owned)
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        sent_before = batches.body_bytes
        cpu_before, started = serve.cpu_s(), time.perf_counter()
        await asyncio.gather(
            *(batches.client(session, c, per_client, keys) for c in range(clients))
        )
        wall, cpu = time.perf_counter() - started, serve.cpu_s() - cpu_before
        sent = batches.body_bytes - sent_before
        await batches.release(session)
    entries = clients * per_client * len(batches.owned[0])
    return {
        "entries": entries,
        "wall_s": wall,
        "entries_per_s": entries / wall,
        "server_cpu_us": cpu / entries * 1e6,
        "body_bytes_per_entry": sent / entries,
    }


async def _stored(etcd: LocalEtcd, partition: str, held: int) -> bytes:
    """The raw etcd value of `partition`'s record once it holds `held` keys (the
    publisher writes it within a publish interval of 1 s; 30 s at most)."""
    kv = EtcdKV([etcd.endpoint])
    try:
        store = WatermarkStore(kv, NAMESPACE)
        deadline = time.monotonic() + 30
        while True:
            item = await kv.get(store.partition_key(partition))
            if item is not None:
                refs = PartitionRecord.references_of(item.value, partition=partition)
                if refs is not None and refs.keys == held:
                    return bytes(item.value)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{partition}'s record never held {held} keys")
            await asyncio.sleep(0.2)  # a benchmark waiting for a publish round, not a test
    finally:
        await kv.close()


async def _hold_some(serve: Serve, batches: Batches, keys: int, rounds: int) -> int:
    """Write `rounds` batches of one client, naming `keys` keys an entry, not released."""
    lag, batches.lag = batches.lag, None  # held: no reconciler meanwhile
    try:
        async with aiohttp.ClientSession() as session:
            await batches.client(session, 0, rounds, keys)
    finally:
        batches.lag = lag
    return rounds * keys


def _throughput(scale: Scale, runs: int, report: Report, lag: int | None = None) -> bytes:
    clients, batch, per_client = _SIZES[scale]
    results: dict[int, list[dict[str, float]]] = {k: [] for k in _SIDES}
    sides = list(_SIDES)
    with LocalEtcd() as etcd:
        epoch = asyncio.run(_cluster_epoch(etcd))
        serve = Serve(etcd, [f"bench/{i}" for i in range(clients * batch)])
        try:
            batches = Batches(serve.url, clients, batch, epoch, lag)
            for keys in sides:  # warm-up, untimed: connections, first records, caches
                asyncio.run(_side(serve, batches, 1, keys))
            for r in range(runs):
                for keys in sides[r % len(sides) :] + sides[: r % len(sides)]:
                    results[keys].append(asyncio.run(_side(serve, batches, per_client, keys)))
            held = asyncio.run(_hold_some(serve, batches, 4, per_client))
            stored = asyncio.run(_stored(etcd, batches.owned[0][0], held))
        finally:
            serve.stop()
    base = median([x["entries_per_s"] for x in results[0]])
    base_cpu = median([x["server_cpu_us"] for x in results[0]])
    rows = []
    for keys in sides:
        rate = median([x["entries_per_s"] for x in results[keys]])
        cpu = median([x["server_cpu_us"] for x in results[keys]])
        paired = [
            mine["entries_per_s"] / theirs["entries_per_s"]
            for mine, theirs in zip(results[keys], results[0], strict=True)
        ]
        rows.append(
            (
                _side_name(keys),
                rate,
                rate / base,
                median(paired),
                ", ".join(f"{p:.2f}" for p in paired),
                cpu,
                cpu / base_cpu if base_cpu else 0.0,
                median([x["body_bytes_per_entry"] for x in results[keys]]),
            )
        )
    entries = clients * batch * per_client
    report.tables.append(
        Table(
            f"{entries:,} entries per side and run: {clients} clients x {per_client} batches "
            f"of {batch} entries (one POST /v1/fences + one POST /v1/commits each), "
            f"{clients * batch} partitions, one `watermark serve` on a real etcd"
            + (
                ""
                if lag is None
                else f"; a reconciler keeping up: after each batch, every entry older than "
                f"{lag} batch(es) reported lifted (timed, every side)"
            ),
            (
                "side",
                "entries/s (median)",
                "x no objects (medians)",
                "x no objects (median of pairs)",
                "pairs, run by run",
                "server CPU us/entry",
                "x no objects (CPU)",
                "request bytes/entry",
            ),
            tuple(rows),
        )
    )
    for row in rows[1:]:
        report.goals.append(
            Goal(
                f"batched commits naming keys vs none ({row[0]}, entries/s, median of pairs)",
                f"{row[3]:.1%} of without (ratio of medians {row[2]:.1%})",
                ">= 90 %",
                row[3] >= 0.9,
            )
        )
    report.raw["throughput"] = {_side_name(k): v for k, v in results.items()}
    return stored


# -- 2. memory -----------------------------------------------------------------------


def _held_bytes(entries: int, keys: int) -> int:
    """tracemalloc bytes of a ReferenceSet holding `entries` entries of `keys` fresh keys."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        refs = ReferenceSet(max_keys=DEFAULT_MAX_REFERENCES)
        for offset in range(entries):
            named = [object_key(7) for _ in range(keys)]
            refs.add(offset, refs.check("bench/0", named))
        del named
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert refs.keys == entries * keys
    return held


def _memory(runs: int, report: Report) -> None:
    one = median([_held_bytes(_MEMORY_KEYS, 1) for _ in range(runs)])
    four = median([_held_bytes(_MEMORY_KEYS // 4, 4) for _ in range(runs)])
    per_entry_1, per_entry_4 = one / _MEMORY_KEYS, four / (_MEMORY_KEYS // 4)
    per_key = (per_entry_4 - per_entry_1) / 3
    overhead = per_entry_1 - per_key
    key_bytes = len(object_key(7))
    at_cap = MAX_REFERENCE_BYTES // key_bytes
    report.tables.append(
        Table(
            f"Publisher memory of held references (tracemalloc, one ReferenceSet, "
            f"{_MEMORY_KEYS:,} keys of {key_bytes} bytes, each a fresh string)",
            ("held", "bytes", "bytes/entry", "bytes/key"),
            (
                (f"{_MEMORY_KEYS:,} entries x 1 key", one, per_entry_1, per_entry_1),
                (f"{_MEMORY_KEYS // 4:,} entries x 4 keys", four, per_entry_4, per_entry_4 / 4),
                ("solved: an entry's own overhead / each key", "", overhead, per_key),
                (
                    f"one partition at the 512 KiB cap: {at_cap:,} entries x 1 key",
                    at_cap * per_entry_1,
                    per_entry_1,
                    per_entry_1,
                ),
            ),
        )
    )
    report.raw["memory"] = {"one_key": one, "four_keys": four}


# -- 3. the record -------------------------------------------------------------------


def _decode_us(raw: bytes, partition: str, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        PartitionRecord.decode(raw, partition=partition)
        times.append(time.perf_counter() - started)
    return median(times) * 1e6


def _record(stored: bytes, partition: str, report: Report) -> None:
    template = PartitionRecord.decode(stored, partition=partition)
    held = template.references
    assert held is not None
    rows: list[tuple[Any, ...]] = []
    bare = dataclasses.replace(template, references=None).encode()
    rows.append(
        ("writer never named any (no field)", 0, len(bare), "", _decode_us(bare, partition))
    )
    for keys in (1, 4):
        for entries in _RECORD_ENTRIES:
            if entries * keys > DEFAULT_MAX_REFERENCES or entries * keys * 75 > MAX_REFERENCE_BYTES:
                continue
            refs = References(
                tuple(
                    (offset, tuple(object_key(7) for _ in range(keys))) for offset in range(entries)
                )
            )
            raw = dataclasses.replace(template, references=refs).encode()
            label = f"{entries:,} {'entries' if entries > 1 else 'entry'} x {keys} key"
            rows.append(
                (
                    label + ("s" if keys > 1 else ""),
                    entries * keys,
                    len(raw),
                    (len(raw) - len(bare)) / (entries * keys),
                    _decode_us(raw, partition),
                )
            )
    rows.append(
        (
            f"as the publisher stored it (etcd), {len(held.entries)} entries x 4 keys",
            held.keys,
            len(stored),
            (len(stored) - len(bare)) / held.keys,
            _decode_us(stored, partition),
        )
    )
    worst = _worst_case(template)
    rows += worst
    report.tables.append(
        Table(
            "The partition record (etcd value) holding N references (75-byte keys unless "
            f"said; the record is refused above {MAX_RECORD_BYTES:,} bytes)",
            ("record", "keys", "bytes", "bytes/key over the bare record", "decode us"),
            tuple(rows),
        )
    )
    over = [row for row in worst if row[2] > MAX_RECORD_BYTES]
    report.goals.append(
        Goal(
            "every record the 512 KiB cap admits stays readable (<= 1 MiB)",
            f"largest {max(row[2] for row in worst):,} bytes",
            f"<= {MAX_RECORD_BYTES:,}",
            not over,
        )
    )


def _worst_case(template: PartitionRecord) -> list[tuple[Any, ...]]:
    """Records at the cap, 1 key an entry: ASCII keys, and keys whose characters the
    ASCII-only record writes as escapes (3-byte UTF-8: 6 bytes; 4-byte: 12 bytes)."""
    names = {
        "75-byte ASCII keys": lambda i: f"level_zero/data/000/{7:018d}/{uuid.UUID(int=i)}",
        "keys with 3-byte UTF-8 characters": lambda i: (
            f"level_zero/data/000/{7:018d}/" + "\u4e2d" * 12 + f"{i:08d}"
        ),
        "keys with 4-byte UTF-8 characters": lambda i: (
            f"level_zero/data/000/{7:018d}/" + "\U0001f600" * 9 + f"{i:08d}"
        ),
    }
    rows = []
    for label, make in names.items():
        refs = ReferenceSet(max_keys=DEFAULT_MAX_REFERENCES)
        offset = 0
        try:
            while True:
                refs.add(offset, refs.check("bench/0", [make(offset)]))
                offset += 1
        except ReferencesFull:
            pass
        raw = dataclasses.replace(template, references=refs.stored()).encode()
        try:
            decode: Any = _decode_us(raw, template.partition, repeat=1)
        except L0gcError:
            decode = "refused: over 1 MiB"
        rows.append((f"at the cap: {label}", refs.keys, len(raw), "", decode))
    return rows


def run(scale: Scale = Scale.FULL, runs: int = 5, lag: int | None = None) -> Report:
    """The three figures (see the module docstring)."""
    report = Report(NAME, TITLE, scale, runs)
    stored = _throughput(scale, runs, report, lag)
    _memory(runs, report)
    _record(stored, "bench/0", report)
    report.notes += [
        (
            "entries/s: (fence, commit) entries applied per second of wall time, all "
            "clients; pairs: each run's ratio to the no-objects side of the same run."
        ),
        (
            "server CPU: user+sys of the serve process per entry, its publish rounds "
            "included; the clients run in the benchmark process and share the cores with it."
        ),
        (
            "memory: Python objects only (tracemalloc), the key strings included; the RSS of "
            "a process is larger by the allocator's slack."
        ),
    ]
    return report


def main(argv: list[str] | None = None) -> int:
    """Run it and print the report (and `--json-out` its runs)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 batches a client, not 50")
    parser.add_argument("--runs", type=int, default=5, help="runs per side (default 5)")
    parser.add_argument("--json-out", type=Path, default=None, help="write the report here")
    parser.add_argument(
        "--reconciler-lag",
        type=int,
        default=None,
        help="a reconciler keeping up this many batches behind, timed on every side "
        "(default: none during a run: every key stays held until the run ends)",
    )
    args = parser.parse_args(argv)
    about = machine()
    started = time.perf_counter()
    report = run(Scale.QUICK if args.quick else Scale.FULL, args.runs, args.reconciler_lag)
    report.notes.append(f"This benchmark took {time.perf_counter() - started:.0f} s.")
    sys.stdout.write(", ".join(f"{k}: {v}" for k, v in about.items()) + "\n\n")
    sys.stdout.write(report.to_markdown())
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        document = {"machine": about, "report": report.to_dict()}
        args.json_out.write_text(json.dumps(document, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
