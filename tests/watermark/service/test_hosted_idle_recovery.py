"""Issue 36, item 4, on real etcd and `watermark serve`: a lone publisher killed with
SIGKILL and restarted used to leave its idle, fully reconciled partitions at their old
M(p) for good (`log_end_known: false`) until an admin called `adopt` with the log end.
Now the reconciler's usual reports carry the log end when the owner asks for it
(`log_end_wanted`), so the partitions move on by themselves; a log end sent before the
owner asked (a read that may predate the restart) is ignored."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from l0gc.contract.record import PartitionRecord
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd
from tests.serving import RECONCILER, WRITER, Serve, new_serve, request, token_file, watermark
from tests.waiting import wait_until_sync

pytestmark = pytest.mark.integration
PARTITIONS = ("orders/0", "orders/1", "orders/2")


def publisher(etcd: LocalEtcd, namespace: str, workdir: Path) -> Serve:
    """The lone publisher of PARTITIONS (ticking itself), not started; killed and started
    again by the test."""
    tokens = token_file(workdir, writer=WRITER, reconciler=RECONCILER)
    return new_serve(
        etcd,
        namespace,
        workdir / "serve.log",
        "--auth-token-file",
        str(tokens),
        "--publish-interval",
        "200ms",
        "--tick-interval",
        "500ms",
        "--ticker-lease-ttl",
        "2",
        "--log-level",
        "info",
        partitions=PARTITIONS,
        owner="lone-publisher",
    )


def call(
    serve: Serve, method: str, path: str, body: dict[str, Any] | None = None, token: str = WRITER
) -> tuple[int, dict[str, Any]]:
    return request(serve.url, method, path, body, token)


def state(serve: Serve, partition: str) -> dict[str, Any]:
    status, doc = call(serve, "GET", f"/v1/partitions/{partition.replace('/', '%2F')}")
    assert status == 200, doc
    return doc


def stored(etcd: LocalEtcd, namespace: str) -> tuple[int, dict[str, int]]:
    """The cluster epoch and each partition's stored M(p), read in this process."""

    async def read() -> tuple[int, dict[str, int]]:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        try:
            store = WatermarkStore(kv, namespace)
            records = await store.list_partitions()
            marks = {
                name: record.watermark
                for name, record in records.items()
                if isinstance(record, PartitionRecord)
            }
            return await store.get_cluster_epoch(), marks
        finally:
            await kv.close()

    return asyncio.run(read())


def report(serve: Serve, partition: str, offset: int, log_end: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"offset": offset}
    if log_end is not None:
        body["log_end_offset"] = log_end
    status, doc = call(
        serve,
        "POST",
        f"/v1/partitions/{partition.replace('/', '%2F')}/reconciled",
        body,
        RECONCILER,
    )
    assert status == 200, doc
    return doc


def test_idle_partitions_move_on_after_a_kill_with_only_the_reconcilers_reports(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    """Three idle, reconciled partitions; SIGKILL, restart, the epoch moves on: with only
    the reconcilers' usual reports (no adopt, no admin) every M(p) follows the cluster
    epoch, each partition's log end sent once, when its owner first asked; a log end the
    owner did not ask for changed nothing. No time is promised (the wait's limit only
    ends a failing test)."""
    watermark(etcd_server, namespace, "epoch", "advance")
    watermark(etcd_server, namespace, "partition", "register", *PARTITIONS)
    serve = publisher(etcd_server, namespace, tmp_path)
    serve.start().wait_ready()
    try:
        for partition in PARTITIONS:  # two writes each, reconciled
            encoded = partition.replace("/", "%2F")
            for offset in (0, 1):
                epoch = stored(etcd_server, namespace)[0]
                status, granted = call(
                    serve, "POST", f"/v1/partitions/{encoded}/fence", {"epoch": epoch}
                )
                assert status == 200, granted
                status, body = call(
                    serve, "POST", f"/v1/fences/{granted['token']}/commit", {"offset": offset}
                )
                assert status == 200, body
            report(serve, partition, 1)
        wait_until_sync(
            lambda: all(m >= 1 for m in stored(etcd_server, namespace)[1].values()),
            timeout_s=60,
            what="the writes reconciled and published",
        )
        serve.child.kill()
        _, before = stored(etcd_server, namespace)
        serve.start().wait_ready()
        first = state(serve, PARTITIONS[0])
        assert (first["log_end_known"], first["log_end_wanted"]) == (False, True), first
        # A log end sent before the owner asked is ignored (it may predate the restart).
        early = report(serve, PARTITIONS[0], 1, log_end=1)
        assert early["log_end_known"] is False
        epoch_at_start = stored(etcd_server, namespace)[0]
        log_ends = dict.fromkeys(PARTITIONS, 0)

        def reconcilers_report() -> bool:
            """One round of each reconciler's usual report (the log end when asked)."""
            for partition in PARTITIONS:
                if report(serve, partition, 1)["log_end_wanted"]:
                    log_ends[partition] += 1
                    assert report(serve, partition, 1, log_end=1)["log_end_known"] is True
            _, marks = stored(etcd_server, namespace)
            return all(marks[p] >= epoch_at_start for p in PARTITIONS)

        wait_until_sync(
            reconcilers_report,
            timeout_s=60,
            what=f"every idle partition at M(p) >= {epoch_at_start}",
            detail=serve.tail,
        )
        _, after = stored(etcd_server, namespace)
        assert all(after[p] > before[p] for p in PARTITIONS), (before, after)
        # asked once each, and that one answer did it: no second ask, no adopt
        assert log_ends == dict.fromkeys(PARTITIONS, 1), log_ends
        assert state(serve, PARTITIONS[0])["log_end_known"] is True
    finally:
        serve.stop()
