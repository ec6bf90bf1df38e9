"""Writer API over HTTP: one request per fence and per commit vs the batched routes.

One `watermark serve` (a process of its own, real etcd, loopback, no tokens, no
ticker, so the cluster epoch stays put) hosts `partitions` partitions. Clients are
asyncio tasks in this process over one keep-alive aiohttp session; each owns its own
partitions (a partition's commit offsets must increase, as a log's do). A side writes
`entries` (fence, commit) pairs in all:

- single: per entry, `POST /v1/partitions/{p}/fence` then `POST /v1/fences/{t}/commit`;
- batch of B: `POST /v1/fences` with B partitions (an L0 object carrying B partitions),
  then one `POST /v1/commits` with the B tokens.

Measured: entries per second of wall time, and the server's CPU per entry (user+sys of
the serve process from /proc/PID/stat), which is what a publisher fleet pays.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import urllib.parse
import urllib.request
from typing import Any

import aiohttp

from bench.common import (
    PYTHON,
    REPO,
    Goal,
    Report,
    Scale,
    Table,
    child_env,
    median,
    pid_cpu_s,
)
from l0lab.testing.local_servers import LocalEtcd, free_port

NAME = "writer_api"
TITLE = "11. Writer API: single fence+commit requests vs batches"
NAMESPACE = "/l0gc/bench-writer-api"
_SIZES = {  # scale: (entries per side, concurrent clients, partitions per client)
    Scale.TOY: (200, 4, 10),
    Scale.QUICK: (4_000, 16, 10),
    Scale.FULL: (20_000, 16, 100),
}
_BATCHES = (10, 100)


class Serve:
    """`watermark serve` hosting `partitions`, stopped by PID."""

    def __init__(self, etcd: LocalEtcd, partitions: list[str]) -> None:
        self.port = free_port()
        spec = f"bench/0-{len(partitions) - 1}"
        argv = [
            PYTHON,
            "-m",
            "watermark",
            "serve",
            "--etcd",
            etcd.endpoint,
            "--namespace",
            NAMESPACE,
            "--partitions",
            spec,
            "--register",
            "--http-host",
            "127.0.0.1",
            "--http-port",
            str(self.port),
            "--publish-interval",
            "1s",
            "--log-level",
            "warning",
        ]
        self.proc = subprocess.Popen(
            argv, env=child_env(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 60
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode()[-2000:] if self.proc.stderr else ""
                self.stop()
                raise RuntimeError(f"watermark serve did not become ready: {err}")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        """Its API."""
        return f"http://127.0.0.1:{self.port}"

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def cpu_s(self) -> float:
        """CPU seconds the serve process has used."""
        return pid_cpu_s(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after 10 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class Writers:
    """The clients of one side; each keeps its partitions' next offsets."""

    def __init__(self, base: str, clients: int, per_client: int, epoch: int) -> None:
        self.base = base
        self.epoch = epoch
        self.owned = [
            [f"bench/{c * per_client + i}" for i in range(per_client)] for c in range(clients)
        ]
        self.offsets = {p: 0 for group in self.owned for p in group}

    async def _post(self, session: aiohttp.ClientSession, path: str, body: Any) -> Any:
        async with session.post(self.base + path, json=body) as response:
            doc = await response.json()
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status} {doc}")
            return doc

    async def single(self, session: aiohttp.ClientSession, client: int, count: int) -> None:
        """`count` fence+commit pairs, one request each, round-robin over the partitions."""
        mine = self.owned[client]
        for n in range(count):
            partition = mine[n % len(mine)]
            name = urllib.parse.quote(partition, safe="")
            fence = await self._post(session, f"/v1/partitions/{name}/fence", {"epoch": self.epoch})
            await self._post(
                session, f"/v1/fences/{fence['token']}/commit", {"offset": self.offsets[partition]}
            )
            self.offsets[partition] += 1

    async def batched(
        self, session: aiohttp.ClientSession, client: int, count: int, size: int
    ) -> None:
        """`count` entries as batches of `size` partitions: one fence and one commit
        request per batch."""
        mine = self.owned[client]
        for start in range(0, count, size):
            chosen = [mine[(start + i) % len(mine)] for i in range(min(size, count - start))]
            fences = [{"partition": p, "epoch": self.epoch} for p in chosen]
            granted = (await self._post(session, "/v1/fences", {"fences": fences}))["results"]
            commits = []
            for partition, result in zip(chosen, granted, strict=True):
                if result["status"] != 200:
                    raise RuntimeError(f"fence refused: {result}")
                commits.append({"token": result["token"], "offset": self.offsets[partition]})
                self.offsets[partition] += 1
            done = (await self._post(session, "/v1/commits", {"commits": commits}))["results"]
            if any(r["status"] != 200 for r in done):
                raise RuntimeError(f"commit refused: {done}")


async def _side(
    serve: Serve, writers: Writers, entries: int, batch: int | None
) -> dict[str, float]:
    clients = len(writers.owned)
    per_client = entries // clients
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        cpu_before, started = serve.cpu_s(), time.perf_counter()
        if batch is None:
            work = [writers.single(session, c, per_client) for c in range(clients)]
        else:
            work = [writers.batched(session, c, per_client, batch) for c in range(clients)]
        await asyncio.gather(*work)
        wall, cpu = time.perf_counter() - started, serve.cpu_s() - cpu_before
    done = per_client * clients
    return {
        "entries": done,
        "wall_s": wall,
        "entries_per_s": done / wall,
        "server_cpu_us": cpu / done * 1e6,
    }


async def _cluster_epoch(etcd: LocalEtcd) -> int:
    from l0gc.etcd.client import EtcdKV  # noqa: PLC0415
    from l0gc.etcd.store import WatermarkStore  # noqa: PLC0415

    kv = EtcdKV([etcd.endpoint])
    try:
        return await WatermarkStore(kv, NAMESPACE).init_cluster_epoch(1)
    finally:
        await kv.close()


def run(scale: Scale = Scale.FULL, runs: int = 5) -> Report:
    """Every side `runs` times, rotating the order (see the module docstring)."""
    entries, clients, per_client = _SIZES[scale]
    sides: list[tuple[str, int | None]] = [("single requests", None)]
    sides += [(f"batches of {b}", b) for b in _BATCHES if b <= per_client]
    report = Report(NAME, TITLE, scale, runs)
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    with LocalEtcd() as etcd:
        epoch = asyncio.run(_cluster_epoch(etcd))
        serve = Serve(etcd, [f"bench/{i}" for i in range(clients * per_client)])
        try:
            writers = Writers(serve.url, clients, per_client, epoch)
            for r in range(runs):
                for name, batch in sides[r % len(sides) :] + sides[: r % len(sides)]:
                    results[name].append(asyncio.run(_side(serve, writers, entries, batch)))
        finally:
            serve.stop()
    base_rate = median([x["entries_per_s"] for x in results["single requests"]])
    base_cpu = median([x["server_cpu_us"] for x in results["single requests"]])
    rows = []
    for name, _ in sides:
        rate = median([x["entries_per_s"] for x in results[name]])
        cpu = median([x["server_cpu_us"] for x in results[name]])
        # A toy run may use less CPU than one clock tick (10 ms): no ratio then.
        rows.append((name, rate, cpu, rate / base_rate, base_cpu / cpu if cpu else 0.0))
    report.tables.append(
        Table(
            f"{entries:,} fence+commit entries per side, {clients} clients, "
            f"{clients * per_client} partitions, one `watermark serve` on a real etcd",
            (
                "side",
                "entries/s (median)",
                "server CPU us/entry",
                "x single (entries/s)",
                "x single (server CPU)",
            ),
            tuple(rows),
        )
    )
    best = max(rows[1:], key=lambda row: row[3]) if len(rows) > 1 else rows[0]
    report.goals.append(
        Goal(
            f"batched writer API vs single requests ({best[0]}, entries/s)",
            f"{best[3]:.1f}x (server CPU {best[4]:.1f}x less)",
            ">= 10x",
            best[3] >= 10,
        )
    )
    report.notes += [
        "entries/s: (fence, commit) pairs applied per second of wall time, all clients.",
        (
            "server CPU: user+sys of the serve process (/proc/PID/stat) per entry; the clients "
            "run in the benchmark process and share the 2 cores with it."
        ),
    ]
    report.raw["runs"] = results
    return report
