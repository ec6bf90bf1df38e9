"""`watermark serve` changes nothing before it can serve (issue 25, finding 2): real etcd
and real `watermark serve` processes.

A second `serve` with the same --partitions on a port in use, or with a bad token file,
exits 2 and leaves every partition record as it found it (owner, owner_epoch) while the
first publisher keeps serving; one on a free port does not take the partitions of the
live publisher either (it waits about two lease TTLs, then exits 2) unless told
--take-over; a publisher that stopped cleanly releases its liveness key, so its
successor (a rolling restart) adopts without waiting out its lease.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from l0lab.testing.local_servers import LocalEtcd, free_port
from l0lab.testing.procs import Child, child_env, wait_http
from tests.waiting import wait_until
from watermark.etcd.settings import EtcdSettings, open_kv
from watermark.etcd.store import WatermarkStore

pytestmark = pytest.mark.integration


def _serve_argv(etcd: LocalEtcd, namespace: str, owner: str, port: int, *extra: str) -> list[str]:
    return ["-m", "watermark", "serve", "--etcd", etcd.endpoint, "--namespace", namespace,
            "--partitions", "p/0-1", "--register", "--http-port", str(port), "--owner-id", owner,
            "--member-lease-ttl", "2", "--publish-interval", "0.2", "--drain-timeout", "0.5",
            *extra]  # fmt: skip


def _run(argv: list[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], check=False, capture_output=True, text=True,
        timeout=timeout_s,
        env=child_env(),
    )  # fmt: skip


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
    port = free_port()
    # A's lease outlives every wait of the others (2 x 2 s + 1 s): only its clean stop can
    # free its partitions in time.
    argv = _serve_argv(etcd_server, namespace, "a", port)
    argv[argv.index("--member-lease-ttl") + 1] = "30"
    first = Child.python("a", argv, tmp_path / "a.log")
    first.start()
    try:
        assert await asyncio.to_thread(
            wait_http, f"http://127.0.0.1:{port}/readyz", 60, child=first
        ), first.log_path.read_text()
        before = await _owners(etcd_server, namespace)
        assert before == {"p/0": ("a", 1), "p/1": ("a", 1)}

        # The port is in use: exit 2, nothing written (this bumped owner_epoch to 2 before).
        taken = _run(_serve_argv(etcd_server, namespace, "b", port))
        assert taken.returncode == 2, taken.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in taken.stderr
        assert await _owners(etcd_server, namespace) == before

        # A bad token file: exit 2 before etcd is contacted.
        bad = tmp_path / "tokens"
        bad.write_text("writer:short\n")
        bad.chmod(0o600)
        refused = _run(_serve_argv(etcd_server, namespace, "b", free_port(),
                                   "--auth-token-file", str(bad)))  # fmt: skip
        assert refused.returncode == 2, refused.stderr
        assert "line 1: not a token" in refused.stderr
        assert await _owners(etcd_server, namespace) == before

        # A free port, the live publisher's partitions (a typo, a forgotten process):
        # waits about 2 lease TTLs for the owner to go, then exit 2 naming it.
        started = time.monotonic()
        typo = _run(_serve_argv(etcd_server, namespace, "b", free_port()))
        assert typo.returncode == 2, typo.stderr
        assert "owned by a live publisher: p/0 (owner a), p/1 (owner a)" in typo.stderr
        assert "--take-over" in typo.stderr
        assert 4.0 <= time.monotonic() - started < 30
        assert await _owners(etcd_server, namespace) == before
        assert _hosted(port) == "a"  # the first one kept serving

        # A rolling restart: the first stops cleanly (its liveness key goes with it), the
        # next adopts at once, without waiting out a lease.
        assert await asyncio.to_thread(first.stop, 30.0) == 0
        next_port = free_port()
        second = Child.python(
            "c", _serve_argv(etcd_server, namespace, "c", next_port), tmp_path / "c.log"
        ).start()
        try:
            assert await asyncio.to_thread(  # it would exit 2 if A's key (30 s) were left
                wait_http, f"http://127.0.0.1:{next_port}/readyz", 60, child=second
            ), second.log_path.read_text()
            assert await _owners(etcd_server, namespace) == {"p/0": ("c", 2), "p/1": ("c", 2)}

            # --take-over: the operator's explicit choice takes them from a live owner.
            forced = Child.python(
                "d", _serve_argv(etcd_server, namespace, "d", free_port(), "--take-over"),
                tmp_path / "d.log",
            ).start()  # fmt: skip
            try:
                async def taken_over() -> bool:
                    assert forced.alive, forced.log_path.read_text()
                    return (await _owners(etcd_server, namespace))["p/1"][0] == "d"  # adopted last

                await wait_until(taken_over, timeout_s=30, what="--take-over adopted p/1",
                                 detail=forced.log_path.read_text)  # fmt: skip
                assert await _owners(etcd_server, namespace) == {"p/0": ("d", 3), "p/1": ("d", 3)}
            finally:
                forced.stop(15.0)
        finally:
            second.stop(15.0)
    finally:
        first.stop(15.0)
