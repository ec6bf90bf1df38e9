"""Red-team round 4 on real servers: an operator's `repair` or `deregister` under a live
`watermark serve`, and a writer's extreme offset, never let a committed object become
deletable and never brick a partition (docs/reliability.md, "What the operator commands
promise"). Each test reproduces a finding as it was reported and fails before its fix."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from l0lab.testing.local_servers import LocalEtcd, etcd_binary
from l0lab.testing.procs import child_env
from tests.serving import ADMIN, WRITER, Serve, live_serve, request
from tests.waiting import wait_until_sync

pytestmark = pytest.mark.integration
P = "orders/0"
PATH = "orders%2F0"


def admin(serve: Serve, *args: str) -> subprocess.CompletedProcess[str]:
    """`watermark ARGS` against the serve's etcd and namespace, as an operator runs it."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "watermark",
            *args,
            "--etcd",
            serve.etcd,
            "--namespace",
            serve.namespace,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=child_env(),
    )


def call(
    serve: Serve, method: str, path: str, body: dict[str, Any] | None = None, token: str = WRITER
) -> tuple[int, dict[str, Any]]:
    return request(serve.url, method, path, body, token)


def record(serve: Serve) -> dict[str, Any]:
    done = admin(serve, "partition", "show", P, "--json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def put_by_hand(etcd: LocalEtcd, serve: Serve, doc: dict[str, Any]) -> None:
    """Write orders/0's record with etcdctl, behind l0gc's back (as an operator might)."""
    etcdctl = etcd_binary().with_name("etcdctl")
    subprocess.run(
        [
            str(etcdctl),
            "--endpoints",
            etcd.endpoint,
            "put",
            f"{serve.namespace}/partitions/{P}",
            json.dumps(doc),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )


def fence(serve: Serve, epoch: int, timeout_s: float = 2.0) -> tuple[int, dict[str, Any]]:
    return call(
        serve, "POST", f"/v1/partitions/{PATH}/fence", {"epoch": epoch, "timeout_s": timeout_s}
    )


@pytest.fixture
def serve(etcd_server: LocalEtcd, namespace: str, tmp_path: Path) -> Iterator[Serve]:
    """A serve hosting orders/0 with two writes committed, its window [E-1, E]."""
    with live_serve(etcd_server, namespace, tmp_path, partitions=(P,), epochs=3) as live:
        assert admin(live, "epoch", "advance").returncode == 0
        for offset, epoch in enumerate((3, 4)):
            status, granted = fence(live, epoch)
            assert status == 200, granted
            status, body = call(
                live, "POST", f"/v1/fences/{granted['token']}/commit", {"offset": offset}
            )
            assert status == 200, body
        assert call(live, "GET", f"/v1/partitions/{PATH}")[1]["window"] == [3, 4]
        yield live


def test_a_raise_under_a_live_owner_is_refused_and_force_revokes_it_first(
    serve: Serve,
) -> None:
    """Finding 1: `repair --watermark E-1` under a live owner was written silently, the
    owner kept admitting E-1 and a writer one epoch behind committed an object the next
    sweep deleted. Now: exit 2 naming the owner, nothing written; with --force the owner
    is revoked first, so after the command no fence at E-1 is granted (or committed)."""
    before = record(serve)
    refused = admin(serve, "partition", "repair", P, "--watermark", "3")
    assert refused.returncode == 2, refused
    assert "writer-gw-1" in refused.stderr
    assert "--force" in refused.stderr
    assert record(serve) == before
    status, early = fence(serve, 3)  # a writer one epoch behind, before the repair
    assert status == 200
    forced = admin(
        serve,
        "partition",
        "repair",
        P,
        "--watermark",
        "3",
        "--force",
        "--reason",
        "test",
        "--revoke-wait",
        "3s",
        "--json",
    )
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["owner_revoked"] is True
    after = record(serve)
    assert (after["watermark"], after["owner"]) == (3, None)
    assert after["owner_epoch"] == before["owner_epoch"] + 1
    status, body = call(serve, "POST", f"/v1/fences/{early['token']}/commit", {"offset": 2})
    assert status != 200, body
    status, body = fence(serve, 3, 0.5)
    assert status != 200, body


def test_a_raise_written_behind_l0gcs_back_raises_the_owners_floor(
    serve: Serve, etcd_server: LocalEtcd
) -> None:
    """M(p) raised in etcd by hand (etcdctl, or a repair while the owner looked idle):
    within a round the owner admits nothing at or below it and a fence held there
    cannot commit; the epoch above is still served."""
    status, held = fence(serve, 3)
    assert status == 200
    put_by_hand(etcd_server, serve, {**record(serve), "watermark": 3})
    wait_until_sync(
        lambda: call(serve, "GET", f"/v1/partitions/{PATH}")[1]["published_watermark"] == 3,
        timeout_s=30,
        what="the owner learned M(p) = 3",
    )
    status, body = fence(serve, 3, 0.5)
    assert (status, body["error"]) == (409, "stale_epoch")
    status, body = call(serve, "POST", f"/v1/fences/{held['token']}/commit", {"offset": 2})
    assert status == 410, body
    status, granted = fence(serve, 4)
    assert status == 200, granted


def test_deregister_under_a_live_owner_is_refused_and_force_stops_the_owner(
    serve: Serve,
) -> None:
    """Finding 3: deregister under a live serve was silent and the owner kept granting
    fences. Now exit 2 (nothing deleted); with --force, once it returns, the owner
    grants nothing for the partition."""
    refused = admin(serve, "partition", "deregister", P)
    assert refused.returncode == 2, refused
    assert record(serve)["partition"] == P
    forced = admin(serve, "partition", "deregister", P, "--force", "--revoke-wait", "3s", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["deregistered"] == [P]
    status, body = fence(serve, 4, 0.5)
    assert status in (404, 503), body


def test_an_offset_beyond_the_maximum_is_refused_and_releases_its_fence(
    serve: Serve,
) -> None:
    """Findings 2 and 4: a commit at 2**63-1 was applied and every later commit was
    illegal_offset, across restarts. Now it is 409 illegal_offset, nothing is applied,
    the fence is released at once (a slide is granted within 0.5 s), and the next
    ordinary offset commits."""
    status, granted = fence(serve, 4)
    assert status == 200
    path = f"/v1/fences/{granted['token']}/commit"
    status, body = call(serve, "POST", path, {"offset": 2**63 - 1})
    assert (status, body["error"]) == (409, "illegal_offset")
    assert "9007199254740991" in body["message"]
    assert admin(serve, "epoch", "advance").returncode == 0
    status, slid = fence(serve, 5, 0.5)
    assert status == 200, slid
    status, body = call(serve, "POST", f"/v1/fences/{slid['token']}/commit", {"offset": 2})
    assert status == 200, body
    assert body["last_applied_offset"] == 2


def test_repair_reset_tracker_unbricks_a_partition_and_refuses_lowering_owner_epoch(
    serve: Serve, etcd_server: LocalEtcd
) -> None:
    """A tracker left at offset 2**63-1 by an older version: `repair --reset-tracker`
    drops it and the owner (no --force: M(p) stays), after which a new owner adopts the
    partition with the real log end. Finding 8: `--owner-epoch 0` is refused without
    --force."""
    lowered = admin(serve, "partition", "repair", P, "--owner-epoch", "0")
    assert lowered.returncode == 2, lowered
    assert "owner_epoch" in lowered.stderr
    bricked = record(serve)
    bricked["tracker"]["last_applied_offset"] = 2**63 - 1
    bricked["owner"] = None
    put_by_hand(etcd_server, serve, bricked)
    reset = admin(serve, "partition", "repair", P, "--reset-tracker", "--json")
    assert reset.returncode == 0, reset.stderr
    after = record(serve)
    assert after["tracker"] is None
    assert after["watermark"] == bricked["watermark"]
    status, state = call(
        serve, "POST", f"/v1/partitions/{PATH}/adopt", {"log_end_offset": 1}, token=ADMIN
    )
    assert status == 200, state
    assert state["window"][0] is None or state["window"][0] > after["watermark"]
    status, granted = fence(serve, 4)
    assert status == 200, granted
    status, body = call(serve, "POST", f"/v1/fences/{granted['token']}/commit", {"offset": 2})
    assert status == 200, body
