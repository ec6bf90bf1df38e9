"""`gcd spark-sweep` / `spark-report --storage azure` end to end on Azurite: listings on
the executors and generated Blob Inventory reports delete exactly the eligible blobs,
keep the live ones and other namespaces' roots (claims probed where the inventory is
older than the container), and the connection string's key is never written anywhere.

Azurite stamps its own Last-Modified (a blob cannot be backdated), so the sweeps run
with `--grace 0`; the grace itself is the shared classifier's (tests/gcd/spark/test_sweep.py).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from azure.storage.blob import BlobServiceClient

from gcd.cli.main import main
from gcd.rules.cursor import Cursor
from gcd.rules.layout import KeyLayout
from gcd.storage.azure.client import AzureBlobStore
from gcd.storage.azure.executor import AzureTarget
from gcd.storage.azure.settings import AzureSettings
from gcd.storage.executor import SkipAhead
from l0gc import exitcodes
from l0gc.contract.binding import claim_key
from l0lab.testing.azinventory import Blob, container_blobs, write_blob_inventory
from l0lab.testing.local_azurite import LocalAzurite

from .test_nesting import other_claim

pytestmark = [pytest.mark.spark, pytest.mark.integration]

M = 10
ROOT = "level_zero/data"


def key(prefix: int, epoch: int, name: str = "obj") -> str:
    return f"{ROOT}/{prefix:03d}/{epoch:018d}/{name}"


ELIGIBLE = {key(1, 5), key(1, 10), key(500, 3, "a b+c"), key(999, 0), key(7, 9)}
LIVE = {key(1, 11), key(2, 15), key(500, 20), key(7, 30), key(7, 31)}
UNPARSABLE = {f"{ROOT}/123/notanepoch/x", f"{ROOT}/12/000000000000000005/x"}
OUTSIDE = {"other/001/000000000000000005/x"}
NESTED = f"{ROOT}/417"
UNDER_NESTED = {key(417, 5), key(417, 2, "b")}


@pytest.fixture
def container(azurite_server: LocalAzurite, tmp_path: Path) -> Iterator[tuple[Any, list[str]]]:
    """A fresh container and the `gcd` flags that reach it (connection string in a file)."""
    name = f"spark-{uuid.uuid4().hex[:12]}"
    conn = azurite_server.write_connection_string(tmp_path / "azure-connection-string")
    service = BlobServiceClient.from_connection_string(azurite_server.connection_string)
    client = service.create_container(name)
    flags = [
        "--storage",
        "azure",
        "--account-url",
        azurite_server.account_url,
        "--container",
        name,
        "--azure-connection-string-file",
        str(conn),
    ]
    yield client, flags
    client.delete_container()


def seed(client: Any, names: set[str], body: bytes = b"x") -> None:
    for name in sorted(names):
        client.upload_blob(name, body, overwrite=True)


def seed_all(client: Any) -> None:
    seed(client, ELIGIBLE | LIVE | UNPARSABLE | OUTSIDE | UNDER_NESTED)
    seed(client, {claim_key(NESTED)}, other_claim(NESTED))


def names(client: Any) -> set[str]:
    return {blob.name for blob in client.list_blobs()}


def run(command: str, flags: list[str], out: Path, *extra: str) -> int:
    return main(
        [
            command,
            *flags,
            "--output",
            str(out),
            "--safe-epoch",
            str(M),
            "--grace",
            "0",
            "--json",
            "--log-level",
            "debug",
            *extra,
        ]
    )


def summary(out: Path, name: str = "summary.json") -> dict[str, Any]:
    return dict(json.loads((out / name).read_text()))


def assert_no_secret(azurite_server: LocalAzurite, out: Path, captured: Any) -> None:
    """The account key appears in no output, log line, summary or decision."""
    secret = azurite_server.connection_string.split("AccountKey=")[1].split(";")[0]
    texts = [captured.out, captured.err]
    texts += [p.read_bytes().decode("latin-1") for p in out.rglob("*") if p.is_file()]
    assert all(secret not in text and secret[:16] not in text for text in texts)


def test_list_sweep_deletes_the_eligible_blobs_and_keeps_the_rest(
    spark: Any,
    container: tuple[Any, list[str]],
    azurite_server: LocalAzurite,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """--list on Azurite: the eligible blobs go (Blob Batch, rate-limited); live,
    unparsable, outside and nested-root blobs stay; no key in any output."""
    client, flags = container
    seed_all(client)
    out = tmp_path / "out"
    code = run(
        "spark-sweep",
        flags,
        out,
        "--list",
        "--list-tasks",
        "7",
        "--batch-size",
        "2",
        "--max-deletes-per-second",
        "500",
        "--delete-tasks",
        "2",
    )
    assert code == exitcodes.OK
    left = names(client)
    assert not left & ELIGIBLE
    assert LIVE | UNPARSABLE | OUTSIDE | UNDER_NESTED | {claim_key(NESTED)} <= left
    done = summary(out)
    assert (done["deleted"], done["errors"], done["eligible"]) == (len(ELIGIBLE), 0, len(ELIGIBLE))
    assert done["nested_roots"] == [NESTED]
    assert done["skipped_nested"] == len(UNDER_NESTED) + 1
    assert done["source"] == "list"
    assert done["delete_requests"] >= 3
    frame = pd.read_parquet(out / "decisions")
    actions = dict(zip(frame["key"], frame["action"], strict=True))
    assert {k for k, a in actions.items() if a == "deleted"} == ELIGIBLE
    assert_no_secret(azurite_server, out, capfd.readouterr())


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_a_blob_inventory_sweep_deletes_the_eligible_blobs(
    spark: Any,
    container: tuple[Any, list[str]],
    azurite_server: LocalAzurite,
    tmp_path: Path,
    file_format: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """From a generated Blob Inventory: eligible blobs go, a stale row is harmless, rows of
    other containers, snapshots and soft-deleted rows are ignored, and a claim written
    after the inventory is found by a probe and its subtree kept."""
    client, flags = container
    seed_all(client)
    old = datetime.now(UTC) - timedelta(hours=2)
    foreign = Blob("other-container", key(1, 1), 1, old)
    snapshot = Blob(client.container_name, key(2, 15), 1, old, snapshot="2026-11-21T00:00:00Z")
    rows = [
        *container_blobs(client),
        foreign,
        snapshot,
        Blob(client.container_name, key(3, 1, "gone"), 1, old),
    ]
    manifest = write_blob_inventory(
        tmp_path / "dest", azurite_server.account_url, rows, file_format=file_format
    )
    late = f"{ROOT}/500/000000000000000003"  # a nested root claimed after the inventory
    seed(client, {claim_key(late)}, other_claim(late))
    out = tmp_path / "out"
    code = run("spark-sweep", flags, out, "--inventory", str(manifest))
    assert code == exitcodes.OK
    left = names(client)
    assert not left & (ELIGIBLE - {key(500, 3, "a b+c")})
    assert key(500, 3, "a b+c") in left  # under the late claim: kept
    assert left >= LIVE | UNPARSABLE | OUTSIDE | UNDER_NESTED
    done = summary(out)
    assert done["source"] == "inventory"
    assert done["nested_roots"] == [NESTED, late]
    assert done["claim_probes"] > 0
    assert done["claim_probe_failures"] == []
    assert done["deleted"] == len(ELIGIBLE) - 1 + 1  # + the stale row (already gone)
    assert_no_secret(azurite_server, out, capfd.readouterr())


def test_spark_report_on_azure(
    spark: Any, container: tuple[Any, list[str]], tmp_path: Path
) -> None:
    """spark-report --list: the garbage is counted, nothing is deleted."""
    client, flags = container
    seed_all(client)
    out = tmp_path / "report"
    assert run("spark-report", flags, out, "--list") == exitcodes.OK
    report = summary(out, "report.json")
    assert report["garbage_objects"] == len(ELIGIBLE)
    assert report["nested_roots"] == [NESTED]
    assert names(client) >= ELIGIBLE


def test_the_listing_skips_a_live_directory_as_the_daemon_does(
    container: tuple[Any, list[str]], azurite_server: LocalAzurite, tmp_path: Path
) -> None:
    """An executor's listing stops a directory at its first key above M and goes on at
    the next directory through the '/' walk (no StartAfter on Azure)."""
    client, flags = container
    live = {key(1, e) for e in range(11, 40)}
    seed(client, {key(1, 3), key(2, 4), key(3, 5), *live})
    conn = flags[flags.index("--azure-connection-string-file") + 1]
    target = AzureTarget(AzureSettings(azurite_server.account_url, client.container_name, conn))
    calls: list[int] = []
    rows = list(
        target.connect().list_prefix(
            f"{ROOT}/00",
            skip=SkipAhead(KeyLayout.default(ROOT), M),
            on_request=lambda: calls.append(1),
        )
    )
    listed = [row[0] for row in rows]
    assert listed == [key(1, 3), key(1, 11), key(2, 4), key(3, 5)]
    unskipped = list(target.connect().list_prefix(f"{ROOT}/00"))
    assert len(unskipped) == 3 + len(live)


def test_blob_batch_deletes_are_paced_in_parts_of_256(
    container: tuple[Any, list[str]], azurite_server: LocalAzurite
) -> None:
    """A 600-key batch is three Blob Batch requests (256, 256, 88), each paced first;
    a missing blob counts as deleted."""
    client, flags = container
    keys = [key(4, 1, f"k{i:04d}") for i in range(600)]
    seed(client, set(keys[:-1]))  # the last one never existed
    conn = flags[flags.index("--azure-connection-string-file") + 1]
    target = AzureTarget(AzureSettings(azurite_server.account_url, client.container_name, conn))
    paced: list[int] = []
    outcome = target.connect().delete_keys(keys, pace=paced.append)
    assert paced == [256, 256, 88]
    assert outcome == dict.fromkeys(keys)
    assert not names(client)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("missing", "cannot read Blob Inventory manifest"),
        ("garbage", "is not valid JSON"),
        ("running", "status is 'Running'"),
        ("account", "is of account"),
        ("prefix", "none in container"),
    ],
)
def test_a_bad_inventory_is_refused_before_any_spark_work(
    container: tuple[Any, list[str]],
    azurite_server: LocalAzurite,
    tmp_path: Path,
    change: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Unreadable, incomplete or foreign inventories: exit 2 naming the problem."""
    _client, flags = container
    endpoint = (
        "https://other.blob.core.windows.net"
        if change == "account"
        else (azurite_server.account_url)
    )
    manifest = write_blob_inventory(
        tmp_path / "dest",
        endpoint,
        [],
        file_count=1,
        prefix_match=["another/"] if change == "prefix" else (),
        status="Running" if change == "running" else "Succeeded",
    )
    if change == "missing":
        manifest.unlink()
    elif change == "garbage":
        manifest.write_text("{not json")
    code = main(
        [
            "spark-sweep",
            *flags,
            "--inventory",
            str(manifest),
            "--output",
            str(tmp_path / "out"),
            "--safe-epoch",
            "1",
        ]
    )
    assert code == exitcodes.USAGE
    assert message in capsys.readouterr().err


def test_a_container_that_does_not_exist_is_refused_before_any_spark_work(
    container: tuple[Any, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--list on a wrong container: exit 2 saying it does not exist."""
    _, flags = container
    wrong = [*flags]
    wrong[wrong.index("--container") + 1] = "no-such-container"
    code = main(
        ["spark-sweep", *wrong, "--list", "--output", str(tmp_path / "out"), "--safe-epoch", "1"]
    )
    assert code == exitcodes.USAGE
    err = capsys.readouterr().err
    assert "'no-such-container'" in err
    assert "does not exist" in err


def test_an_executor_page_walks_as_the_daemons_store_does(
    container: tuple[Any, list[str]], azurite_server: LocalAzurite
) -> None:
    """From a start point inside a directory (the skip point), the executors' sync walk
    gives the same blobs, in the same order, as the daemon's `AzureBlobStore.list_page`."""
    client, flags = container
    blobs = {key(p, e, n) for p in (1, 2, 13) for e in (3, 12) for n in ("a", "b")}
    seed(client, blobs | {f"{ROOT}/001-junk", f"{ROOT}/00"})
    conn = flags[flags.index("--azure-connection-string-file") + 1]
    settings = AzureSettings(azurite_server.account_url, client.container_name, conn)
    target = AzureTarget(settings)
    start = f"{ROOT}/001/000000000000000003/a"

    def executor_walk() -> list[str]:
        executor = target.connect()
        found: list[str] = []
        cursor: Cursor | None = Cursor(start_after=start)
        while cursor is not None:
            rows, token = executor.list_page(f"{ROOT}/0", cursor, lambda: None)
            found += [row[0] for row in rows]
            cursor = None if token is None else Cursor(start, token)
        return found

    async def daemon_walk() -> list[str]:
        found: list[str] = []
        async with AzureBlobStore.open(settings) as store:
            page = await store.list_page(f"{ROOT}/0", start_after=start, max_keys=2)
            found += [info.key for info in page.objects]
            while page.next_token is not None:
                page = await store.list_page(
                    f"{ROOT}/0", continuation_token=page.next_token, max_keys=2
                )
                found += [info.key for info in page.objects]
        return found

    walked = executor_walk()
    assert walked == asyncio.run(daemon_walk())
    assert walked == sorted((n for n in blobs | {f"{ROOT}/001-junk"} if n > start), key=str.encode)


def test_a_journaled_sweep_is_read_back_like_a_sweepers(
    spark: Any,
    container: tuple[Any, list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--journal-prefix on Azure: the segments go to the container, `gcd journal verify`
    finds every chain whole (not checked against etcd: exit 3, "NOT FULLY CHECKED"), and
    `gcd journal show` says which request deleted a blob."""
    client, flags = container
    seed(client, ELIGIBLE | LIVE)
    out = tmp_path / "out"
    journal = ["--journal-prefix", "l0gc-audit/journal"]
    assert run("spark-sweep", flags, out, "--list", "--batch-size", "2", *journal) == 0
    assert summary(out)["deleted"] == len(ELIGIBLE)
    stored = {n for n in names(client) if n.startswith("l0gc-audit/journal/")}
    assert any(n.endswith(".jsonl") for n in stored)
    assert any(n.rsplit("/", 1)[-1].startswith("anchor-spark-") for n in stored)
    capsys.readouterr()
    code = main(["journal", "verify", *flags, *journal, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == exitcodes.BLOCKED, report
    assert report["verdict"].startswith("NOT FULLY CHECKED: nothing wrong in the journal")
    assert (report["violations"], report["damage"]) == (0, 0)
    deleted = min(ELIGIBLE)
    assert main(["journal", "show", *flags, *journal, "--key", deleted, "--json"]) == 0
    shown = capsys.readouterr().out
    assert '"outcome": "deleted"' in shown
    assert '"sweeper": "spark-' in shown


def test_an_undo_window_needs_the_journal_on_azure_too(
    container: tuple[Any, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--undo-window without --journal-prefix is refused (exit 2) as for S3, nothing
    deleted."""
    client, flags = container
    seed(client, ELIGIBLE)
    code = main(
        [
            "spark-sweep",
            *flags,
            "--list",
            "--output",
            str(tmp_path / "out"),
            "--safe-epoch",
            str(M),
            "--undo-window",
            "1h",
        ]
    )
    assert code == exitcodes.USAGE
    assert "--undo-window 3600s needs --journal-prefix" in capsys.readouterr().err
    assert names(client) == ELIGIBLE


NOWHERE = "http://127.0.0.1:1/devstoreaccount1"  # nothing listens on port 1


@pytest.mark.parametrize("command", ["spark-sweep", "spark-report"])
def test_a_dry_run_or_report_from_an_inventory_needs_no_azure_access(
    spark: Any, tmp_path: Path, command: str
) -> None:
    """From a Blob Inventory with `--safe-epoch`, a dry run and a report make no Azure
    client, on the driver or the executors: a connection string file that does not exist
    and an account nobody answers at do not matter, and the eligible blobs are named."""
    container = "l0gc-nowhere"
    old = datetime.now(UTC) - timedelta(hours=2)
    everything = ELIGIBLE | LIVE | UNPARSABLE | OUTSIDE
    manifest = write_blob_inventory(
        tmp_path / "dest", NOWHERE, [Blob(container, n, 1, old) for n in sorted(everything)]
    )
    flags = [
        "--storage",
        "azure",
        "--account-url",
        NOWHERE,
        "--container",
        container,
        "--azure-connection-string-file",
        str(tmp_path / "absent"),
        "--inventory",
        str(manifest),
    ]
    out = tmp_path / "out"
    if command == "spark-sweep":
        assert run(command, flags, out, "--dry-run") == exitcodes.OK
        frame = pd.read_parquet(out / "decisions")
        would = {
            k for k, a in zip(frame["key"], frame["action"], strict=True) if a == "would_delete"
        }
        assert would == ELIGIBLE
        assert summary(out)["errors"] == 0
    else:
        assert run(command, flags, out) == exitcodes.OK
        assert summary(out, "report.json")["garbage_objects"] == len(ELIGIBLE)


@pytest.mark.parametrize("credentials", ["absent", "unreachable"])
def test_a_deleting_sweep_from_an_inventory_preflights_and_fails_fast(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], credentials: str
) -> None:
    """The same inventory sweep without --dry-run checks the container first: a connection
    string file that cannot be read, or an account that does not answer, exits 2 before
    any Spark work, naming the file or the account URL."""
    conn = tmp_path / "azure-connection-string"
    if credentials == "unreachable":
        LocalAzurite(port=1).write_connection_string(conn)  # the dev key, for NOWHERE
        assert LocalAzurite(port=1).account_url == NOWHERE
    old = datetime.now(UTC) - timedelta(hours=2)
    manifest = write_blob_inventory(
        tmp_path / "dest", NOWHERE, [Blob("l0gc-nowhere", n, 1, old) for n in sorted(ELIGIBLE)]
    )
    flags = [
        "--storage",
        "azure",
        "--account-url",
        NOWHERE,
        "--container",
        "l0gc-nowhere",
        "--azure-connection-string-file",
        str(conn),
        "--inventory",
        str(manifest),
    ]
    started = datetime.now(UTC)
    assert run("spark-sweep", flags, tmp_path / "out") == exitcodes.USAGE
    assert datetime.now(UTC) - started < timedelta(seconds=30)
    expected = (
        "cannot read the Azure connection string file"
        if credentials == "absent"
        else (f"cannot reach {NOWHERE}")
    )
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "out" / "decisions").exists()
