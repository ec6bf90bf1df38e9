"""`watermark serve` changes nothing before it can serve (issue 25, finding 2): real etcd
and real `watermark serve` processes.

A second `serve` with the same --partitions on a port in use, or with a bad token file,
exits 2 and leaves every partition record as it found it (owner, owner_epoch) while the
first publisher keeps serving; one on a free port does not take the partitions of the
live publisher either (it waits about two lease TTLs, then exits 2: up to 2 x
--member-lease-ttl + 1 s, docs/operations.md, timed from its own log line) unless told
--take-over; a publisher that stopped cleanly releases its liveness key, so its
successor (a rolling restart) adopts without waiting out its lease.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest

from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, free_port
from l0lab.testing.procs import child_env
from tests.clirun import run_cli
from tests.serving import Serve, new_serve, serve_args
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


# Every serve of the test hosts p/0-1; A's lease is its own (the others' is TTL_S).
COMMON = ("--register", "--publish-interval", "0.2", "--drain-timeout", "0.5")
PARTITIONS = ("p/0-1",)
TTL_S = 2
WAIT_S = 2 * TTL_S + 1
"""How long a serve waits for a live owner to go (docs/operations.md: up to 2 x
--member-lease-ttl + 1 s), then exits 2."""
EXIT_SLACK_S = 10.0
"""After that wait, its last poll, release and exit (~0.4 s here), on a loaded machine."""


def _start(etcd: LocalEtcd, namespace: str, owner: str, log: Path, *extra: str) -> Serve:
    return new_serve(
        etcd, namespace, log, *COMMON, *extra, partitions=PARTITIONS, owner=owner
    ).start()


def _run(
    etcd: LocalEtcd, namespace: str, owner: str, port: int, *extra: str
) -> subprocess.CompletedProcess[str]:
    argv = serve_args(
        etcd,
        namespace,
        *COMMON,
        "--member-lease-ttl",
        str(TTL_S),
        *extra,
        port=port,
        partitions=PARTITIONS,
        owner=owner,
    )
    return run_cli("watermark", *argv, env=child_env())


def _logged_at(stderr: str, event: str) -> float:
    """When a serve logged `event` (the timestamp of its own JSON log line), as time.time()."""
    for line in stderr.splitlines():
        doc = json.loads(line) if line.startswith("{") else {}
        if doc.get("event") == event:
            return datetime.fromisoformat(doc["timestamp"]).timestamp()
    raise AssertionError(f"no {event} line in its log:\n{stderr}")


async def _owners(etcd: LocalEtcd, namespace: str) -> dict[str, tuple[str | None, int]]:
    kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
    try:
        records = await WatermarkStore(kv, namespace).list_partitions()
    finally:
        await kv.close()
    return {
        name: (record.owner, record.owner_epoch)
        for name, record in records.items()
        if not isinstance(record, Exception)
    }


def _hosted(port: int) -> str | None:
    url = f"http://127.0.0.1:{port}/v1/partitions/p%2F0"
    with urllib.request.urlopen(url, timeout=5) as answer:
        owner: str | None = json.load(answer)["owner"]
    return owner


async def test_a_failed_start_leaves_the_partitions_and_the_live_publisher_alone(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    # A's lease outlives every wait of the others (WAIT_S): only its clean stop can free its
    # partitions in time.
    first = _start(etcd_server, namespace, "a", tmp_path / "a.log", "--member-lease-ttl", "30")
    port = first.port
    try:
        await asyncio.to_thread(first.wait_ready)
        before = await _owners(etcd_server, namespace)
        assert before == {"p/0": ("a", 1), "p/1": ("a", 1)}

        # The port is in use: exit 2, nothing written (this bumped owner_epoch to 2 before).
        taken = _run(etcd_server, namespace, "b", port)
        assert taken.returncode == 2, taken.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in taken.stderr
        assert await _owners(etcd_server, namespace) == before

        # A bad token file: exit 2 before etcd is contacted.
        bad = tmp_path / "tokens"
        bad.write_text("writer:short\n")
        bad.chmod(0o600)
        refused = _run(etcd_server, namespace, "b", free_port(), "--auth-token-file", str(bad))
        assert refused.returncode == 2, refused.stderr
        assert "line 1: not a token" in refused.stderr
        assert await _owners(etcd_server, namespace) == before

        # A free port, the live publisher's partitions (a typo, a forgotten process):
        # waits about 2 lease TTLs for the owner to go, then exit 2 naming it. The wait is
        # timed from its own log line (it starts once it holds its liveness key), not from
        # before the child started: a loaded machine's start-up is no part of it.
        typo = _run(etcd_server, namespace, "b", free_port())
        ended = time.time()
        assert typo.returncode == 2, typo.stderr
        assert "owned by a live publisher: p/0 (owner a), p/1 (owner a)" in typo.stderr
        assert "--take-over" in typo.stderr
        waited = ended - _logged_at(typo.stderr, "watermark.liveness_held")
        assert 2 * TTL_S <= waited < WAIT_S + EXIT_SLACK_S, waited
        assert await _owners(etcd_server, namespace) == before
        assert _hosted(port) == "a"  # the first one kept serving

        # A rolling restart: the first stops cleanly (its liveness key goes with it), the
        # next adopts at once, without waiting out a lease.
        assert await asyncio.to_thread(first.stop, 30.0) == 0
        second = _start(
            etcd_server, namespace, "c", tmp_path / "c.log", "--member-lease-ttl", str(TTL_S)
        )
        try:  # it would exit 2 if A's key (30 s) were left
            await asyncio.to_thread(second.wait_ready)
            assert await _owners(etcd_server, namespace) == {"p/0": ("c", 2), "p/1": ("c", 2)}

            # --take-over: the operator's explicit choice takes them from a live owner.
            forced = _start(
                etcd_server,
                namespace,
                "d",
                tmp_path / "d.log",
                "--member-lease-ttl",
                str(TTL_S),
                "--take-over",
            )
            try:

                async def taken_over() -> bool:
                    assert forced.alive, forced.tail()
                    return (await _owners(etcd_server, namespace))["p/1"][0] == "d"  # adopted last

                await wait_until(
                    taken_over, timeout_s=60, what="--take-over adopted p/1", detail=forced.tail
                )
                assert await _owners(etcd_server, namespace) == {"p/0": ("d", 3), "p/1": ("d", 3)}
            finally:
                forced.stop(15.0)
        finally:
            second.stop(15.0)
    finally:
        first.stop(15.0)
