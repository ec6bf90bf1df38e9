"""`gcd spark-sweep` and references: a job whose M is past a key a partition still
references does not start, and pauses GC in the namespace (real etcd and moto; the job
is refused on the driver, before any Spark session)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from l0gc import exitcodes
from l0gc.contract.namespace import Publication
from l0gc.contract.references import References
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, LocalS3

from .test_sweep import etcd_args, gcd, gcd_args, summary

pytestmark = [pytest.mark.integration]

KEYS = [f"level_zero/data/{p:03d}/{e:018d}/k" for p in range(3) for e in (5, 6, 12)]


async def test_a_referenced_key_at_or_below_m_stops_the_job_and_pauses_gc(
    s3_server: LocalS3,
    bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    set_safe_epoch: Callable[[int, int], Any],
    watermark_store: WatermarkStore,
    tmp_path: Path,
) -> None:
    s3_server.seed(bucket, KEYS, last_modified=datetime.now(UTC) - timedelta(hours=2))
    await set_safe_epoch(10, 20)
    live = KEYS[1]  # epoch 6, at or below M = 10: a writer still references it
    owned = await watermark_store.acquire_ownership("orders-0", "pub-a")
    await watermark_store.publish_one(
        Publication(
            "orders-0", "pub-a", owned.owner_epoch, 10, references=References(((8, (live,)),))
        )
    )
    out = tmp_path / "out"
    argv = [*gcd_args(s3_server, bucket, out, "--list"), *etcd_args(etcd_server, namespace)]
    assert await gcd(argv) == exitcodes.BLOCKED
    done = summary(out)
    assert done["reference_conflicts"] == 1
    assert done["conflicting_keys"] == [live]
    assert "'orders-0'" in done["blocked_reason"]
    assert "offset 8" in done["blocked_reason"]
    assert set(KEYS) <= s3_server.keys(bucket)  # nothing deleted
    paused = await watermark_store.get_paused()
    assert paused is not None
    assert live in paused
