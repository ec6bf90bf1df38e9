"""`gcd status` says why a pinning partition's M(p) does not move (issue 55), on a real
`watermark serve` and etcd: after a SIGKILL its restarted owner waits for the log end,
the record says so, status prints it and the publisher's metric counts it; the
reconciler's log end ends the wait, and M follows the cluster epoch again (two epochs
behind: the window keeps the previous epoch admitted until the next tick). Before, the
pinning line looked like any other."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from l0lab.testing.local_servers import LocalEtcd
from tests.clirun import run_cli
from tests.serving import WRITER, Serve, api_client, new_serve, token_file, watermark
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

REGISTRAR = "registrar-token-0123456789abcdef0"
RECONCILER = "reconciler-token-0123456789abcdef0"
PARTITION = "topic%2F0"
_DEADLINE_S = 60.0


def status(etcd: LocalEtcd, namespace: str, *args: str) -> Any:
    env = {**os.environ, "L0GC_ETCD": etcd.endpoint, "L0GC_NAMESPACE": namespace}
    done = run_cli("gcd", "status", *args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if "--json" in args else done.stdout


def metric(serve: Serve, name: str) -> float:
    with urllib.request.urlopen(serve.probe_url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return float(
        next(line.split()[-1] for line in text.splitlines() if line.startswith(name + " "))
    )


async def test_status_says_a_restarted_owner_waits_for_the_log_end(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    watermark(etcd_server, namespace, "epoch", "advance")
    tokens = token_file(tmp_path, writer=WRITER, registrar=REGISTRAR, reconciler=RECONCILER)
    serve = new_serve(
        etcd_server,
        namespace,
        tmp_path / "serve.log",
        "--auth-token-file",
        str(tokens),
        "--member-lease-ttl",
        "2",
        owner="gw-1",
    )
    try:
        serve.start().wait_ready(60)
        async with api_client(serve) as api:
            epoch = await api.epoch(WRITER)
            assert (await api.post(f"/v1/partitions/{PARTITION}/register", {}, REGISTRAR))[0] == 200
            status_code, fence = await api.post(
                f"/v1/partitions/{PARTITION}/fence", {"epoch": epoch}, WRITER
            )
            assert status_code == 200, fence
            done = await api.post(f"/v1/fences/{fence['token']}/commit", {"offset": 0}, WRITER)
            assert done[0] == 200, done

            serve.signal(signal.SIGKILL)  # the commit's entry was never published
            assert serve.wait_exit(30) is not None
            serve.start().wait_ready(60)
            for _ in range(3):
                watermark(etcd_server, namespace, "epoch", "advance")

            def waiting() -> Any:
                pins = status(etcd_server, namespace, "--json")["pinning"]
                return pins and pins[0]["waiting"] and pins[0]["waiting"]["on"] == "log_end"

            await wait_until(
                lambda: asyncio.to_thread(waiting),
                timeout_s=_DEADLINE_S,
                what="waiting for the log end in the record",
            )
            text = status(etcd_server, namespace)
            assert "topic/0" in text
            assert "for its log end: its reconciler must send log_end_offset" in text, text
            assert "docs/operations.md#log-end-unknown" in text
            assert metric(serve, "l0gc_watermark_log_end_unknown_partitions") == 1.0

            answer = await api.post(
                f"/v1/partitions/{PARTITION}/reconciled", {"offset": 0}, RECONCILER
            )
            assert answer[1]["log_end_wanted"] is True, answer
            answer = await api.post(
                f"/v1/partitions/{PARTITION}/reconciled",
                {"offset": 0, "log_end_offset": 0},
                RECONCILER,
            )
            assert answer[0] == 200, answer

            def moved() -> Any:
                """M two epochs behind, nothing waiting; the epoch ticks once the owner's
                window reached it (its next idle advance retires the old epoch)."""
                doc = status(etcd_server, namespace, "--json")
                if doc["safe_epoch"] >= doc["cluster_epoch"] - 2:
                    return not any(p["waiting"] for p in doc["pinning"])
                if doc["pinning"] and doc["pinning"][0]["window"][1] == doc["cluster_epoch"]:
                    watermark(etcd_server, namespace, "epoch", "advance")
                return False

            await wait_until(
                lambda: asyncio.to_thread(moved),
                timeout_s=_DEADLINE_S,
                what="M following the cluster epoch once the log end is known",
                detail=serve.tail,
            )
            assert metric(serve, "l0gc_watermark_log_end_unknown_partitions") == 0.0
    finally:
        serve.stop()
