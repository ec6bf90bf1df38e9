"""Register racing deregister of one name over HTTP, on a real `watermark serve` and a
real etcd (issue 51, finding 3).

The red team fired both at once 40 times: in 7 the publisher answered a fence and a
commit 200 for a partition whose record the deregister had just deleted, and the next
sweep deleted the committed object. Here each deregister is sent the moment the
register's new record appears in etcd, so it checks the record while the register is
still adopting it: the interleaving of the bug, on the real processes. Whatever the
order, a commit answered 200 must leave the partition's record in etcd, owned by the
publisher that took it (`tests/watermark/api/test_http_registry.py` forces the one bad
interleaving deterministically).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from l0gc.contract.record import PartitionRecord
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0lab.testing.local_servers import LocalEtcd
from tests.serving import ADMIN, WRITER, api_client, new_serve, token_file, watermark

pytestmark = pytest.mark.integration

REGISTRAR = "registrar-token-0123456789abcdef0"
TRIES = 40


async def test_a_commit_answered_200_always_leaves_its_record_in_etcd(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    watermark(etcd_server, namespace, "epoch", "advance")
    tokens = token_file(tmp_path, writer=WRITER, registrar=REGISTRAR, admin=ADMIN)
    serve = new_serve(
        etcd_server,
        namespace,
        tmp_path / "serve.log",
        "--auth-token-file",
        str(tokens),
        "--log-level",
        "warning",
        owner="gw-1",
    )
    kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
    try:
        serve.start().wait_ready(30)
        async with api_client(serve) as api:
            call = api.post
            epoch = await api.epoch(WRITER)
            outcomes: dict[str, int] = {}
            for i in range(TRIES):
                name, key = f"race%2F{i}", f"{namespace}/partitions/race/{i}"
                registering = asyncio.ensure_future(
                    call(f"/v1/partitions/{name}/register", {}, REGISTRAR)
                )
                while await kv.get(key) is None and not registering.done():
                    pass  # each get is a round trip to etcd: the wait is on the record
                dereg = await call(f"/v1/partitions/{name}/deregister", {}, REGISTRAR)
                reg = await registering
                # A deregister that deleted the record before the register's adopt wins:
                # the register then answers 404 not_registered (register again).
                assert reg[0] == 200 or reg[1]["error"] == "not_registered", reg
                assert dereg[0] in (200, 409), dereg
                status, fence = await call(
                    f"/v1/partitions/{name}/fence", {"epoch": epoch, "timeout_s": 2}, WRITER
                )
                commit = f"/v1/fences/{fence.get('token')}/commit"
                committed = status == 200 and (await call(commit, {"offset": 0}, WRITER))[0] == 200
                if committed:
                    item = await kv.get(key)
                    assert item is not None, (i, reg, dereg)  # the bug: committed, no record
                    assert PartitionRecord.decode(item.value, partition=f"race/{i}").owner == "gw-1"
                seen = f"deregister {dereg[0]}, {'committed' if committed else f'fence {status}'}"
                outcomes[seen] = outcomes.get(seen, 0) + 1
    finally:
        await kv.close()
        serve.stop()
    assert sum(outcomes.values()) == TRIES, outcomes
    print(outcomes)  # what the interleavings were, in the -s output
