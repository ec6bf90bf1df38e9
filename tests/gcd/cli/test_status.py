"""`gcd status` against a real etcd (as a subprocess, configured by env), and its pure parts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Sequence

import pytest

from gcd.cli.output import human_age, write_json
from gcd.cli.status_text import render_text
from gcd.status.report import build_report, is_empty
from gcd.sweep.shards import ShardAnnouncement
from l0gc import exitcodes, strictjson
from l0gc.contract.binding import Binding, StorageTarget
from l0gc.contract.kv import Put
from l0gc.contract.namespace import Publication
from l0gc.contract.record import PartitionRecord
from l0gc.contract.safe_epoch import GcView
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd, free_port
from tests.clirun import run_cli

NOW = 1_763_700_000.0


def gcd(
    args: Sequence[str], etcd: str, namespace: str, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """Run `python -m gcd ARGS` with the etcd settings in the environment."""
    env = {**os.environ, "L0GC_ETCD": etcd, "L0GC_NAMESPACE": namespace, **extra_env}
    return run_cli("gcd", *args, env=env)


def setup(
    etcd: LocalEtcd,
    namespace: str,
    watermarks: dict[str, int],
    *,
    cluster: int = 8,
    malformed: str | None = None,
) -> None:
    """Cluster epoch `cluster`; each partition owned by 'pub' with the given M(p)."""

    async def go() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            await store.init_cluster_epoch(1)
            for name in watermarks:
                await store.register_partition(name)
            for _ in range(cluster - 1):
                await store.advance_cluster_epoch()
            for name, watermark in watermarks.items():
                owned = await store.acquire_ownership(name, "pub")
                await store.publish_one(Publication(name, "pub", owned.owner_epoch, watermark))
            if malformed is not None:
                await kv.txn([], [Put(store.partition_key(malformed), b"not json")])
        finally:
            await kv.close()

    asyncio.run(go())


@pytest.mark.integration
def test_status_json_names_the_partitions_pinning_m(etcd_server: LocalEtcd, namespace: str) -> None:
    """M is the lowest M(p); the partitions at that M(p) are listed as pinning, with owner."""
    setup(etcd_server, namespace, {"orders/0": 5, "orders/1": 3, "orders/2": 3})
    done = gcd(["status", "--json"], etcd_server.endpoint, namespace)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["version"] == 1
    assert doc["namespace"] == namespace
    assert (doc["cluster_epoch"], doc["safe_epoch"], doc["lag_epochs"]) == (8, 3, 5)
    assert doc["blocked"] is False
    assert doc["paused"] is False
    assert doc["partition_count"] == 3
    assert [p["partition"] for p in doc["pinning"]] == ["orders/1", "orders/2"]
    pin = doc["pinning"][0]
    assert (pin["watermark"], pin["owner"], pin["lag_epochs"]) == (3, "pub", 5)
    assert pin["age_s"] is not None
    assert pin["age_s"] < 60
    assert "partitions" not in doc


@pytest.mark.integration
def test_status_exits_3_and_names_a_malformed_partition(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """A malformed record makes M undefined: exit 3, the partition is named, --all shows it."""
    setup(etcd_server, namespace, {"orders/0": 5}, malformed="orders/9")
    done = gcd(["status", "--json", "--all"], etcd_server.endpoint, namespace)
    assert done.returncode == 3, done.stderr
    doc = json.loads(done.stdout)
    assert doc["blocked"] is True
    assert doc["safe_epoch"] is None
    assert doc["blocked_partition"] == "orders/9"
    assert "orders/9" in doc["blocked_reason"]
    broken = {p["partition"]: p for p in doc["partitions"]}["orders/9"]
    assert "not JSON" in broken["error"]
    text = gcd(["status"], etcd_server.endpoint, namespace)
    assert text.returncode == 3
    assert "UNDEFINED" in text.stdout
    assert "watermark partition deregister orders/9" in text.stdout


@pytest.mark.integration
def test_status_all_lists_every_partition(etcd_server: LocalEtcd, namespace: str) -> None:
    """--all prints a row per partition with M(p), lag and owner."""
    setup(etcd_server, namespace, {"a/0": 6, "a/1": 7})
    done = gcd(["status", "--all"], etcd_server.endpoint, namespace)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("a/")]
    assert len(rows) == 2
    assert rows[0].split()[:3] == ["a/0", "6", "2"]
    assert "pub #1" in rows[1]


def test_status_exits_4_when_etcd_is_unreachable(namespace: str) -> None:
    """No etcd listening: exit 4 (etcd unreachable, every command) naming the endpoint;
    with --json a JSON error document on stdout."""
    endpoint = f"127.0.0.1:{free_port()}"
    done = gcd(["status"], endpoint, namespace, L0GC_ETCD_TIMEOUT="1")
    assert done.returncode == exitcodes.ETCD_UNREACHABLE
    assert endpoint in done.stderr
    done = gcd(["status", "--json"], endpoint, namespace, L0GC_ETCD_TIMEOUT="1")
    assert done.returncode == exitcodes.ETCD_UNREACHABLE
    document = json.loads(done.stdout)
    assert document["error"] == "etcd_unreachable"
    assert endpoint in document["message"]


def test_no_partitions_means_m_is_epoch_minus_one() -> None:
    """Without partitions M = cluster epoch - 1 and nothing pins it."""
    report = build_report(GcView(7, b"12", {}), "/l0gc/x", NOW)
    assert (report.safe_epoch, report.lag_epochs, report.pinning) == (11, 1, ())
    assert "every partition is ahead" in render_text(report, NOW)


def test_partitions_are_listed_as_people_count_them() -> None:
    """`orders/2` before `orders/10` (issue 42: they sorted as strings)."""
    records = {
        name: PartitionRecord(name, 5, 1, owner="pub", owner_epoch=1).encode()
        for name in ("orders/10", "orders/2", "audit", "orders/1")
    }
    report = build_report(GcView(1, b"6", records), "/l0gc/x", NOW, include_all=True)
    assert [p.partition for p in report.partitions] == [
        "audit",
        "orders/1",
        "orders/2",
        "orders/10",
    ]


def test_a_mistyped_namespace_exits_2_asking_about_namespace(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """Issue 25: nothing stored under the namespace: exit 2, "is --namespace right?", and no
    advice to create state there (`watermark epoch advance`, `namespace bind`)."""
    for args in (["status"], ["status", "--json"]):
        done = gcd(args, etcd_server.endpoint, namespace + "-typo")
        assert done.returncode == exitcodes.USAGE, done.stderr
        assert "is --namespace right?" in done.stderr
        assert "epoch advance" not in done.stderr + done.stdout
        assert "bind" not in done.stderr + done.stdout
    assert json.loads(done.stdout)["error"] == "usage"
    assert is_empty(GcView(3, None, {}))
    assert not is_empty(GcView(3, b"1", {}))


def test_paused_is_shown_with_reason_and_age() -> None:
    """A paused namespace shows the reason, since when, and how to resume."""
    view = GcView(3, b"5", {}, paused=True, paused_reason="bucket migration")
    report = build_report(view, "/l0gc/x", NOW, paused_at=NOW - 300)
    text = render_text(report, NOW)
    assert "PAUSED since" in text
    assert "(5m ago): bucket migration" in text
    assert "gcd resume" in text
    assert not report.blocked


def test_human_age() -> None:
    """Ages read as seconds, minutes, hours or days."""
    assert [human_age(s) for s in (None, 1.25, 90, 7200, 3 * 86400)] == [
        "-",
        "1.2s ago",
        "2m ago",
        "2h ago",
        "3d ago",
    ]


# -- hostile bytes in etcd: status reports them and exits, never crashes ------------------


def put_raw(etcd: LocalEtcd, namespace: str, values: dict[str, bytes]) -> None:
    """Write `values` as they are under `{namespace}/` (key suffix -> raw value)."""

    async def go() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd.endpoint,), namespace=namespace))
        try:
            await kv.txn([], [Put(f"{namespace}/{key}", value) for key, value in values.items()])
        finally:
            await kv.close()

    asyncio.run(go())


def strict_json(stdout: str) -> dict[str, object]:
    """Parse `stdout` with the strict parser (no NaN, no duplicate keys) as a JSON object."""
    doc = strictjson.loads(stdout, what="gcd status --json", max_bytes=1 << 20)
    assert isinstance(doc, dict)
    return doc


@pytest.mark.integration
def test_a_100k_deep_record_is_reported_not_a_crash(etcd_server: LocalEtcd, namespace: str) -> None:
    """A record of 100 000 nested arrays: exit 3, the partition named, no traceback."""
    setup(etcd_server, namespace, {"orders/0": 5})
    put_raw(etcd_server, namespace, {"partitions/orders/deep": b"[" * 100_000})
    text = gcd(["status"], etcd_server.endpoint, namespace)
    assert text.returncode == 3, text.stderr
    assert "Traceback" not in text.stderr
    assert "partition 'orders/deep'" in text.stdout
    assert "nested more than 16 levels" in text.stdout
    done = gcd(["status", "--json", "--all"], etcd_server.endpoint, namespace)
    assert done.returncode == 3, done.stderr
    doc = strict_json(done.stdout)
    assert (doc["blocked"], doc["blocked_partition"]) == (True, "orders/deep")


@pytest.mark.integration
def test_records_that_are_not_strictly_valid_block_and_are_listed(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """version 1.0 or true, a duplicate key, NaN: each record is MALFORMED and M is blocked."""
    setup(etcd_server, namespace, {"orders/0": 5})
    good = '"watermark": 3, "created_epoch": 1'
    put_raw(
        etcd_server,
        namespace,
        {
            "partitions/bad/float-version": f'{{"version": 1.0, {good}}}'.encode(),
            "partitions/bad/true-version": f'{{"version": true, {good}}}'.encode(),
            "partitions/bad/duplicate": f'{{"version": 1, {good}, "watermark": 9}}'.encode(),
            "partitions/bad/nan": f'{{"version": 1, {good}, "updated_at": NaN}}'.encode(),
        },
    )
    done = gcd(["status", "--json", "--all"], etcd_server.endpoint, namespace)
    assert done.returncode == 3, done.stderr
    doc = strict_json(done.stdout)
    assert (doc["blocked"], doc["safe_epoch"]) == (True, None)
    assert doc["blocked_partition"] == "bad/duplicate"  # the lowest-sorting bad name
    partitions = doc["partitions"]
    assert isinstance(partitions, list)
    errors = {p["partition"]: p["error"] for p in partitions}
    assert "unsupported record version 1.0" in errors["bad/float-version"]
    assert "unsupported record version True" in errors["bad/true-version"]
    assert "the key 'watermark' more than once" in errors["bad/duplicate"]
    assert "NaN is not a JSON number" in errors["bad/nan"]
    assert errors["orders/0"] is None


@pytest.mark.integration
@pytest.mark.parametrize(
    ("marker", "reason"),
    [
        (b'{"reason": "upgrade", "at": 1e300}', "upgrade"),
        (b'{"reason": "upgrade", "at": NaN}', "unreadable pause marker (NaN is not a JSON number"),
        (b"[" * 50_000, "unreadable pause marker (it is nested more than 4 levels deep"),
    ],
)
def test_a_pause_marker_with_an_insane_time_shows_paused_since_unknown(
    etcd_server: LocalEtcd, namespace: str, marker: bytes, reason: str
) -> None:
    """A pause time of 1e300 or NaN, or an unreadable marker: exit 0, paused, time unknown."""
    setup(etcd_server, namespace, {"orders/0": 5})
    put_raw(etcd_server, namespace, {"gc/paused": marker})
    text = gcd(["status"], etcd_server.endpoint, namespace)
    assert text.returncode == 0, text.stderr
    assert f"PAUSED since an unknown time: {reason}" in text.stdout
    done = gcd(["status", "--json"], etcd_server.endpoint, namespace)
    assert done.returncode == 0, done.stderr
    doc = strict_json(done.stdout)
    assert (doc["paused"], doc["paused_at"]) == (True, None)
    assert str(doc["paused_reason"]).startswith(reason)


@pytest.mark.integration
def test_terminal_escapes_from_etcd_are_printed_escaped(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """Escapes in a partition name, an owner and the pause reason never reach the terminal."""
    setup(etcd_server, namespace, {"orders/0": 5})
    evil = PartitionRecord("evil\x1b[2J", 6, 1, owner="pub", owner_epoch=1).encode()
    owner = json.dumps(
        {"version": 1, "watermark": 6, "created_epoch": 1, "owner": "\x1b[31mred"}
    ).encode()
    put_raw(
        etcd_server,
        namespace,
        {
            "partitions/evil\x1b[2J": evil,
            "partitions/owner": owner,
            "gc/paused": json.dumps({"reason": "\x1b]0;pwned\x07", "at": 1}).encode(),
        },
    )
    text = gcd(["status", "--all"], etcd_server.endpoint, namespace)
    assert text.returncode == 3, text.stderr
    assert "\x1b" not in text.stdout
    assert "\x07" not in text.stdout
    assert "evil\\x1b[2J" in text.stdout
    assert "\\x1b[31mred" in text.stdout
    assert "PAUSED since 1970-01-01T00:00:01Z" in text.stdout
    assert "\\x1b]0;pwned\\x07" in text.stdout
    doc = strict_json(gcd(["status", "--json", "--all"], etcd_server.endpoint, namespace).stdout)
    assert doc["paused_reason"] == "\x1b]0;pwned\x07"  # JSON carries the exact string


def test_render_text_escapes_every_string_from_etcd() -> None:
    """Partition names, owners, errors and reasons are escaped; surrogates do not crash."""
    partitions = {
        "p\x1b[2J": PartitionRecord("p\x1b[2J", 3, 1, owner="pub", owner_epoch=1).encode(),
        "q\udcff": b"\x1b[31m",
    }
    view = GcView(3, b"5", partitions, paused=True, paused_reason="a\nb\x1b")
    report = build_report(view, "/l0gc/x", NOW, include_all=True)
    text = render_text(report, NOW)
    assert text.isprintable() is False  # newlines between lines, nothing else
    assert all(line.isprintable() for line in text.splitlines())
    text.encode("utf-8")
    assert "p\\x1b[2J" in text
    assert "q\\udcff" in text
    assert "PAUSED since an unknown time: a\\nb\\x1b" in text


def test_status_json_is_valid_even_with_non_finite_numbers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """write_json turns NaN and infinities into null: the output always parses strictly."""
    write_json({"version": 1, "age_s": float("nan"), "at": [float("inf"), 1.5]})
    doc = strict_json(capsys.readouterr().out)
    assert doc == {"version": 1, "age_s": None, "at": [None, 1.5]}


def test_status_shows_the_binding_and_shard_disagreement() -> None:
    """Unbound, bound, another etcd cluster; running sweepers and their disagreement."""
    unbound = build_report(GcView(1, b"5", {}), "/l0gc/x", NOW)
    assert unbound.binding is None
    assert "not bound" in str(unbound.binding_problem)
    assert "binding        not bound" in render_text(unbound, NOW)
    binding = Binding("/l0gc/x", StorageTarget("b", "r"), "id1", "c1", 1.0).encode()
    running = (ShardAnnouncement("s-a", 0, 2, 1.0), ShardAnnouncement("s-b", 0, 3, 1.0))
    sweepers = {a.sweeper_id: a.encode() for a in running}
    view = GcView(1, b"5", {}, binding_raw=binding, cluster_id="c1", sweepers=sweepers)
    report = build_report(view, "/l0gc/x", NOW)
    text = render_text(report, NOW)
    assert "bound to       s3://b/r" in text
    assert "sweepers       2 running: s-a 0/2, s-b 0/3" in text
    assert "shards         DISAGREE: shard counts disagree" in text
    assert report.to_dict()["sweepers"][1]["shard_count"] == 3
    # issue 25: sweepers blocked on a shard conflict is not "gc running" (exit 3)
    assert report.refused
    assert "gc             REFUSED: sweepers delete nothing" in text
    assert "gc             running" not in text
    assert "gc             waiting: sweepers delete nothing until" in render_text(unbound, NOW)
    assert not unbound.refused
    moved = build_report(GcView(1, b"5", {}, binding_raw=binding, cluster_id="c2"), "/x", NOW)
    assert "etcd cluster c1, but this is etcd cluster c2" in str(moved.binding_problem)
    assert moved.refused


def test_a_lag_of_one_epoch_is_singular() -> None:
    """`(lag 1 epoch)`, `(lag 2 epochs)`: no "1 epochs"."""
    one = render_text(build_report(GcView(1, b"6", {}), "/l0gc/x", NOW), NOW)
    assert "global M       5  (lag 1 epoch)" in one
    record = PartitionRecord("p", 4, 1, owner="o", owner_epoch=1).encode()
    two = render_text(build_report(GcView(1, b"6", {"p": record}), "/l0gc/x", NOW), NOW)
    assert "global M       4  (lag 2 epochs)" in two


def test_status_exits_3_and_says_refused_while_sweepers_disagree_on_shards(
    etcd_server: LocalEtcd, namespace: str
) -> None:
    """Issue 25: sweepers blocked on a shard conflict: not "gc running" with exit 0, but
    REFUSED with exit 3, and the disagreement named (real etcd)."""
    setup(etcd_server, namespace, {"orders/0": 5})
    running = (ShardAnnouncement("s-a", 0, 2, 1.0), ShardAnnouncement("s-b", 0, 3, 1.0))

    async def announce() -> None:
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
        store = WatermarkStore(kv, namespace)
        try:
            await kv.txn(
                [], [Put(store.sweepers_prefix + a.sweeper_id, a.encode()) for a in running]
            )
        finally:
            await kv.close()

    asyncio.run(announce())
    done = gcd(["status"], etcd_server.endpoint, namespace)
    assert done.returncode == exitcodes.BLOCKED, done.stderr
    assert "gc             REFUSED: sweepers delete nothing" in done.stdout
    assert "shards         DISAGREE: shard counts disagree" in done.stdout
    assert "gc             running" not in done.stdout


def test_status_shows_what_the_sweepers_detected_about_the_bucket() -> None:
    """Issue 28: versioning, Object Lock, listing order and batch deletes as the running
    sweepers detected them, one line per distinct answer, also in --json."""
    locked = {
        "versioning": "Enabled",
        "object_lock": True,
        "listing": "ordered",
        "batch_delete": True,
    }
    fallback = {
        "versioning": "off",
        "object_lock": None,
        "listing": "unordered",
        "batch_delete": False,
    }
    running = (
        ShardAnnouncement("s-a", 0, 3, 1.0, locked),
        ShardAnnouncement("s-b", 1, 3, 1.0, locked),
        ShardAnnouncement("s-c", 2, 3, 1.0, fallback),
    )
    view = GcView(1, b"5", {}, sweepers={a.sweeper_id: a.encode() for a in running})
    report = build_report(view, "/l0gc/x", NOW)
    lines = [line for line in render_text(report, NOW).splitlines() if line.startswith("store ")]
    assert lines == [
        "store          versioning Enabled, object lock on, listing ordered, batch delete yes",
        (
            "store          versioning off, object lock unknown, listing unordered, batch delete "
            "NO (single deletes)"
        ),
    ]
    assert report.to_dict()["sweepers"][2]["store"] == fallback
    problem = "cannot list level_zero/data/417: skipped"
    troubled = ShardAnnouncement("s-d", 0, 1, 1.0, None, (problem,))
    shown = build_report(GcView(1, b"5", {}, sweepers={"s-d": troubled.encode()}), "/x", NOW)
    assert "last round     s-d: cannot list level_zero/data/417: skipped" in render_text(shown, NOW)
    assert shown.to_dict()["sweepers"][0]["problems"] == list(troubled.problems)
    undetected = {"s-a": ShardAnnouncement("s-a", 0, 1, 1.0).encode()}
    quiet = build_report(GcView(1, b"5", {}, sweepers=undetected), "/l0gc/x", NOW)
    assert "store " not in render_text(quiet, NOW)
