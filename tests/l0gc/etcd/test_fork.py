"""A process with a busy etcd client can still fork+exec (PySpark starts its JVM that
way, with a `preexec_fn`, while the driver's etcd client follows the pause key)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from l0lab.testing.local_servers import LocalEtcd

pytestmark = pytest.mark.integration

_CHILD = textwrap.dedent(
    """
    import asyncio, signal, subprocess, sys
    from l0gc.etcd.settings import EtcdSettings, open_kv

    def launch(count, failed):
        for _ in range(count):
            started = subprocess.Popen(
                ["/bin/true"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)
            )
            if started.wait() != 0:
                failed.append(started.returncode)

    async def main():
        kv = await open_kv(EtcdSettings(endpoints=(sys.argv[1],), namespace="/fork"))
        stop = asyncio.Event()

        async def busy():
            while not stop.is_set():
                await kv.get("/fork/k")

        calls = [asyncio.create_task(busy()) for _ in range(4)]
        failed = []
        await asyncio.to_thread(launch, 300, failed)
        stop.set()
        await asyncio.gather(*calls)
        await kv.get("/fork/k")  # the client still works
        await kv.close()
        print("failed", len(failed))

    asyncio.run(main())
    """
)


def test_fork_exec_succeeds_while_etcd_calls_are_in_flight(etcd_server: LocalEtcd) -> None:
    """300 launches with a preexec_fn beside 4 busy etcd calls: none fails (with gRPC's
    fork handlers on, ~20 of them exited non-zero before their exec)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, etcd_server.endpoint],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "failed 0", done.stdout[-2000:]
    assert "skipping fork() handlers" not in done.stderr
