"""A partition a writer registers over HTTP stays hosted across a SIGKILL and restart of
its publisher, with no admin call (issue 55), on a real `watermark serve` and etcd.

Before, the restarted publisher hosted only its --partitions list: the partition's
record still named its owner id, a second register answered ``hosted: false``, fences
``not_hosted``, and its unmoving M(p) held GC back until an admin adopted it.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from l0lab.testing.local_servers import LocalEtcd
from tests.serving import WRITER, api_client, new_serve, token_file, watermark

pytestmark = pytest.mark.integration

REGISTRAR = "registrar-token-0123456789abcdef0"


async def test_a_partition_registered_over_http_is_hosted_again_after_a_sigkill(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    watermark(etcd_server, namespace, "epoch", "advance")
    tokens = token_file(tmp_path, writer=WRITER, registrar=REGISTRAR)
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
            call = api.post
            epoch = await api.epoch(WRITER)
            status, doc = await call("/v1/partitions/topic%2F0/register", {}, REGISTRAR)
            assert (status, doc["registered"], doc["hosted"]) == (200, True, True), doc
            status, doc = await call("/v1/partitions/topic%2F0/fence", {"epoch": epoch}, WRITER)
            assert status == 200, doc

            serve.signal(signal.SIGKILL)
            assert serve.wait_exit(30) is not None
            serve.start().wait_ready(60)

            status, doc = await call("/v1/partitions/topic%2F0/fence", {"epoch": epoch}, WRITER)
            assert status == 200, (doc, serve.tail())
            status, doc = await call("/v1/partitions/topic%2F0/register", {}, REGISTRAR)
            assert (status, doc["registered"], doc["hosted"]) == (200, False, True), doc
    finally:
        serve.stop()
