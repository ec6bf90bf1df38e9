"""`gcd spark-sweep` / `spark-report --storage gcs` on the GCS emulator (real JSON API on
loopback, with the Content-ID launcher of `l0lab.testing.gcs_emulator`), and a real etcd.

Listings run on the executors (objects.list, skip-ahead as the daemon's), deletes go
as JSON batches of 100 matched by Content-ID, and Storage Insights inventory reports
are generated here in the documented format
(https://cloud.google.com/storage/docs/insights/inventory-reports: a
``{config}_{snapshot}_manifest.json`` naming the shards ``{config}_{snapshot}_{n}.csv``,
the snapshot to the minute as in
https://cloud.google.com/storage/docs/insights/v1/reportDetail; ``report_config`` as the
ReportConfig resource of googleapis storageinsights.proto; CSV with a header row or
Parquet, columns named as the configured metadata fields, the names of
https://cloud.google.com/sdk/gcloud/reference/storage/insights/inventory-reports/create).
The emulator stamps its own ``updated`` time, so list-mode runs use ``--grace 0s``; its
deviations are pinned at the end.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gcd.cli.main import main
from gcd.storage.gcs.client import GcsObjectStore
from gcd.storage.gcs.executor import GcsTarget
from gcd.storage.gcs.inventory import GcsInventoryManifest, read_gcs_inventory
from gcd.storage.gcs.settings import GcsSettings
from gcd.sweep.binding import bind_namespace
from l0gc import exitcodes
from l0gc.contract.binding import claim_key
from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_gcs import LocalGcs
from l0lab.testing.local_servers import LocalEtcd

from .conftest import publish_safe_epoch
from .test_sweep import decisions, gcd, key, summary

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROOT = "level_zero/data"
CLAIM = claim_key(ROOT)  # the binding's claim (etcd tests)
SAFE_EPOCH = 10
ELIGIBLE = {key(1, 5), key(1, 10), key(500, 3, "a b,c"), key(999, 0), key(7, 9)}
LIVE = {key(1, 11), key(2, 15), key(500, 20), key(7, 30), key(7, 31)}
UNPARSABLE = {"level_zero/data/123/notanepoch/x", "level_zero/data/123/00000000000005/x"}
OUTSIDE = {"other/001/000000000000000005/x"}
NESTED = "level_zero/data/417"
UNDER_NESTED = {key(417, 5), key(417, 2, "b"), claim_key(NESTED)}
MANY = {key(600, 4, f"k{index:03d}") for index in range(150)}  # > one batch of 100
FIELDS = [
    "project",
    "bucket",
    "name",
    "location",
    "size",
    "timeCreated",
    "updated",
    "storageClass",
    "etag",
    "generation",
    "metageneration",
    "contentType",
]


def args(
    server: LocalGcs, bucket: str, out: Path, *extra: str, command: str = "spark-sweep"
) -> list[str]:
    """The command's flags for this emulator bucket (anonymous, like every emulator)."""
    return [
        command,
        "--storage",
        "gcs",
        "--gcs-anonymous",
        "--bucket",
        bucket,
        "--endpoint-url",
        server.endpoint_url,
        "--output",
        str(out),
        "--json",
        "--grace",
        "0s",
        *extra,
    ]


async def bind_gcs(
    etcd_server: LocalEtcd,
    namespace: str,
    server: LocalGcs,
    bucket: str,
    safe_epoch: int = SAFE_EPOCH,
) -> None:
    """Publish M and bind the namespace to gs://bucket/root, as an operator does."""
    kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
    settings = GcsSettings(bucket, server.endpoint_url, anonymous=True)
    try:
        await publish_safe_epoch(WatermarkStore(kv, namespace), safe_epoch, safe_epoch + 10)
        async with GcsObjectStore.open(settings) as objects:
            await bind_namespace(WatermarkStore(kv, namespace), objects, settings.target(ROOT))
    finally:
        await kv.close()


def write_report(
    destination: Path,
    bucket: str,
    names: Sequence[str],
    *,
    file_format: str = "csv",
    shards: int = 2,
    updated: datetime | None = None,
    young: Sequence[str] = (),
    stamp: str = "%Y-%m-%dT%H:%M:%S.%fZ",
    record_separator: str = "\n",
    full_paths: bool = False,
) -> Path:
    """A Storage Insights inventory report of `names` (and `young`, updated now) as GCS
    writes it: shards and ``{config}_{snapshot}_manifest.json``; the manifest's path.
    `stamp`: the strftime form of the times; `full_paths`: the shards named only as
    ReportDetail's ``report_names`` (``DEST/PATH/NAME``)."""
    destination.mkdir(parents=True, exist_ok=True)
    config = "1b2c3d4e-0000-4000-8000-00000000abcd"
    snapshot = "2026-11-22T00:00"  # in names: to the minute (reportDetail's example)
    old = updated or datetime.now(UTC) - timedelta(hours=2)
    now = datetime.now(UTC)
    rows = [(name, old) for name in names] + [(name, now) for name in young]
    shard_names = []
    for index in range(shards):
        chunk = rows[index::shards]
        records = [
            {
                "project": "123456",
                "bucket": bucket,
                "name": name,
                "location": "US",
                "size": "1",
                "timeCreated": moment.strftime(stamp),
                "updated": moment.strftime(stamp),
                "storageClass": "STANDARD",
                "etag": "CJ6Z",
                "generation": "1700000000000000",
                "metageneration": "1",
                "contentType": "application/octet-stream",
            }
            for name, moment in chunk
        ]
        name = f"{config}_{snapshot}_{index}.{file_format}"
        if file_format == "csv":
            text = io.StringIO()
            writer = csv.DictWriter(text, FIELDS, lineterminator=record_separator)
            writer.writeheader()
            writer.writerows(records)
            (destination / name).write_text(text.getvalue(), encoding="utf-8")
        else:
            table = pa.table({field: [r[field] for r in records] for field in FIELDS})
            table = table.set_column(
                FIELDS.index("size"),
                "size",
                pa.array([int(r["size"]) for r in records], pa.int64()),
            )
            pq.write_table(table, destination / name)
        shard_names.append(name)
    options = (
        {
            "csv_options": {
                "delimiter": ",",
                "record_separator": record_separator,
                "header_required": True,
            }
        }
        if file_format == "csv"
        else {"parquet_options": {}}
    )
    manifest = {
        "report_config": {
            "name": f"projects/123456/locations/us-central1/reportConfigs/{config}",
            **options,
            "object_metadata_report_options": {
                "metadata_fields": FIELDS,
                "storage_filters": {"bucket": bucket},
                "storage_destination_options": {
                    "bucket": "inventory-dest",
                    "destination_path": "reports",
                },
            },
        },
        "records_processed": len(rows),
        "snapshot_time": "2026-11-22T00:00:00Z",
        "shard_count": shards,
    }
    if full_paths:
        manifest["report_names"] = [f"inventory-dest/reports/{n}" for n in shard_names]
    else:
        manifest["report_shards_file_names"] = shard_names
    path = destination / f"{config}_{snapshot}_manifest.json"
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return path


def seed(server: LocalGcs, bucket: str, *extra: set[str]) -> set[str]:
    """The mixed set (and `extra`) in the bucket; everything seeded."""
    everything = ELIGIBLE | LIVE | UNPARSABLE | OUTSIDE
    for more in extra:
        everything |= more
    server.seed(bucket, sorted(everything))
    return everything


def actions_of(out: Path, action: str) -> set[str]:
    return {k for k, a in decisions(out).items() if a == action}


async def test_list_dry_run_names_exactly_the_eligible_keys(
    spark: Any, gcs_server: LocalGcs, gcs_bucket: str, tmp_path: Path
) -> None:
    """A dry run (--list, M from --safe-epoch) names the eligible keys and deletes nothing;
    live prefix tails are skipped as in the daemon."""
    everything = seed(gcs_server, gcs_bucket)
    out = tmp_path / "out"
    code = await gcd(
        args(
            gcs_server,
            gcs_bucket,
            out,
            "--list",
            "--list-tasks",
            "10",
            "--safe-epoch",
            str(SAFE_EPOCH),
            "--dry-run",
        )
    )
    assert code == exitcodes.OK
    assert gcs_server.keys(gcs_bucket) == everything
    assert actions_of(out, "would_delete") == ELIGIBLE
    assert actions_of(out, "kept_unparsable") == UNPARSABLE
    done = summary(out)
    assert (done["would_delete"], done["deleted"], done["delete_requests"]) == (5, 0, 0)
    assert done["source"] == "list"
    assert done["list_requests"] >= 10
    # Prefix 007: epoch 30 ends the directory, so epoch 31 is never returned.
    assert key(7, 31) not in decisions(out)


async def test_list_sweep_deletes_eligible_keeps_live_and_nested_roots(
    spark: Any,
    gcs_server: LocalGcs,
    gcs_bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
) -> None:
    """M from etcd through the sweeper's admission; JSON batches (150 keys: two batches of
    at most 100) delete exactly the eligible keys; live, unparsable, outside keys and
    everything under another namespace's root stay."""
    everything = seed(gcs_server, gcs_bucket, MANY)
    await bind_gcs(etcd_server, namespace, gcs_server, gcs_bucket)
    gcs_server.seed(gcs_bucket, sorted(UNDER_NESTED))  # claimed by hand, after the bind
    everything |= UNDER_NESTED
    out = tmp_path / "out"
    code = await gcd(
        args(
            gcs_server,
            gcs_bucket,
            out,
            "--list",
            "--list-tasks",
            "10",
            "--max-deletes-per-second",
            "5000",
            "--delete-concurrency",
            "4",
            "--etcd",
            etcd_server.endpoint,
            "--namespace",
            namespace,
        )
    )
    assert code == exitcodes.OK, summary(out)
    assert gcs_server.keys(gcs_bucket) == (everything | {CLAIM}) - ELIGIBLE - MANY
    assert actions_of(out, "deleted") == ELIGIBLE | MANY
    assert actions_of(out, "kept_nested_root") == UNDER_NESTED
    done = summary(out)
    assert (done["safe_epoch"], done["cluster_epoch"]) == (SAFE_EPOCH, SAFE_EPOCH + 10)
    assert (done["deleted"], done["errors"]) == (len(ELIGIBLE | MANY), 0)
    assert done["nested_roots"] == [NESTED]
    assert done["delete_requests"] >= 2  # 155 keys, at most 100 per batch


async def test_a_journaled_sweep_verifies_and_a_window_waits_for_ms_history(
    spark: Any,
    gcs_server: LocalGcs,
    gcs_bucket: str,
    etcd_server: LocalEtcd,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--journal-prefix on GCS: `gcd journal verify` checks the run against etcd (OK) and
    `gcd explain` names the application. With an undo window GCS's soft delete is not
    relied on (the rows carry no generation): the M of one window ago, none yet."""
    seed(gcs_server, gcs_bucket)
    await bind_gcs(etcd_server, namespace, gcs_server, gcs_bucket)
    etcd = ["--etcd", etcd_server.endpoint, "--namespace", namespace]
    journal = ["--journal-prefix", "l0gc-audit/journal"]
    out = tmp_path / "window"
    argv = args(gcs_server, gcs_bucket, out, "--list", "--undo-window", "1h", *journal, *etcd)
    assert await gcd(argv) == exitcodes.OK
    waited = summary(out)
    assert waited["undo"]["rule"] == "delayed-m"
    assert (waited["deleted"], waited["undo"]["delayed_safe_epoch"]) == (0, None)
    out = tmp_path / "out"
    assert await gcd(args(gcs_server, gcs_bucket, out, "--list", *journal, *etcd)) == 0
    done = summary(out)
    assert done["deleted"] == len(ELIGIBLE)
    store = ["--storage", "gcs", "--gcs-anonymous", "--bucket", gcs_bucket]
    store += ["--endpoint-url", gcs_server.endpoint_url]
    capsys.readouterr()
    assert await gcd(["journal", "verify", *store, *journal, *etcd, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "OK"
    assert await gcd(["explain", *store, *journal, *etcd, min(ELIGIBLE)]) == 0
    assert f"deleted by Spark application {done['application']}" in capsys.readouterr().out


async def test_inventory_csv_sweep_probes_claims_newer_than_the_report(
    spark: Any, gcs_server: LocalGcs, gcs_bucket: str, tmp_path: Path
) -> None:
    """From a CSV Storage Insights report: the eligible keys go (a row deleted since the
    snapshot too: 404 is deleted), a young row stays, and a claim written after the
    snapshot is found by a probe, its subtree kept."""
    everything = seed(gcs_server, gcs_bucket, UNDER_NESTED)
    gone = key(3, 2, "gone")  # in the report, deleted since
    young = key(4, 1, "young")
    gcs_server.seed(gcs_bucket, [young])
    listed = sorted((everything - {claim_key(NESTED)}) | {gone})  # the claim came later
    manifest = write_report(
        tmp_path / "inv", gcs_bucket, [n for n in listed if n != young], young=[young]
    )
    out = tmp_path / "out"
    code = await gcd(
        args(
            gcs_server,
            gcs_bucket,
            out,
            "--inventory",
            str(manifest),
            "--grace",
            "600s",
            "--safe-epoch",
            str(SAFE_EPOCH),
            "--batch-size",
            "2",
        )
    )
    assert code == exitcodes.OK, summary(out)
    assert gcs_server.keys(gcs_bucket) == (everything | {young}) - ELIGIBLE
    assert actions_of(out, "deleted") == ELIGIBLE | {gone}
    assert actions_of(out, "kept_too_young") == {young}
    assert actions_of(out, "kept_nested_root") == UNDER_NESTED - {claim_key(NESTED)}
    done = summary(out)
    assert done["source"] == "inventory"
    assert done["nested_roots"] == [NESTED]
    assert done["claim_probes"] >= 1
    assert done["delete_requests"] >= 3  # 6 keys in batches of 2


async def test_parquet_inventory_dry_run_and_report(
    spark: Any, gcs_server: LocalGcs, gcs_bucket: str, tmp_path: Path
) -> None:
    """A Parquet report: a dry run names the eligible keys and calls nothing; spark-report
    on the same report counts the garbage."""
    everything = seed(gcs_server, gcs_bucket)
    manifest = write_report(
        tmp_path / "inv", gcs_bucket, sorted(everything), file_format="parquet", shards=3
    )
    out = tmp_path / "out"
    code = await gcd(
        args(
            gcs_server,
            gcs_bucket,
            out,
            "--inventory",
            str(manifest),
            "--safe-epoch",
            str(SAFE_EPOCH),
            "--dry-run",
        )
    )
    assert code == exitcodes.OK
    assert actions_of(out, "would_delete") == ELIGIBLE
    assert gcs_server.keys(gcs_bucket) == everything
    report_out = tmp_path / "report"
    code = await gcd(
        args(
            gcs_server,
            gcs_bucket,
            report_out,
            "--inventory",
            str(manifest),
            "--safe-epoch",
            str(SAFE_EPOCH),
            command="spark-report",
        )
    )
    assert code == exitcodes.OK
    report = json.loads((report_out / "report.json").read_text())
    assert report["garbage_objects"] == len(ELIGIBLE)
    assert report["eligible_bytes"] == len(ELIGIBLE)


async def test_report_from_a_listing(
    spark: Any, gcs_server: LocalGcs, gcs_bucket: str, tmp_path: Path
) -> None:
    """spark-report --list on GCS: every object listed, the garbage counted, nothing deleted."""
    everything = seed(gcs_server, gcs_bucket)
    out = tmp_path / "report"
    code = await gcd(
        args(
            gcs_server,
            gcs_bucket,
            out,
            "--list",
            "--list-tasks",
            "4",
            "--safe-epoch",
            str(SAFE_EPOCH),
            command="spark-report",
        )
    )
    assert code == exitcodes.OK
    report = json.loads((out / "report.json").read_text())
    assert report["garbage_objects"] == len(ELIGIBLE)
    assert report["objects"] == len(everything - OUTSIDE)
    assert gcs_server.keys(gcs_bucket) == everything
    assert (out / "report.png").is_file()


@pytest.mark.parametrize(
    "problem",
    [
        "missing_bucket",
        "other_bucket",
        "bad_json",
        "missing_shard",
        "no_updated",
        "shard_lacks_updated",
    ],
)
async def test_bad_input_is_a_clear_error(
    spark: Any,
    gcs_server: LocalGcs,
    gcs_bucket: str,
    tmp_path: Path,
    problem: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bucket that does not exist, a report of another bucket, an unreadable manifest, a
    missing shard, a report without `updated`, shards without the column the manifest
    promises: exit 2 naming the problem, nothing deleted."""
    everything = seed(gcs_server, gcs_bucket)
    manifest = write_report(tmp_path / "inv", gcs_bucket, sorted(everything))
    bucket, source, expected = gcs_bucket, ["--inventory", str(manifest)], ""
    if problem == "missing_bucket":
        bucket, source, expected = "l0gc-no-such-bucket", ["--list"], "does not exist"
    elif problem == "other_bucket":
        write_report(tmp_path / "inv", "someone-elses", sorted(everything))
        expected = "lists bucket 'someone-elses'"
    elif problem == "bad_json":
        manifest.write_text("{not json", encoding="utf-8")
        expected = "is not valid JSON"
    elif problem == "missing_shard":
        next((tmp_path / "inv").glob("*_1.csv")).unlink()
        expected = "not found at"
    elif problem == "shard_lacks_updated":
        for shard in (tmp_path / "inv").glob("*.csv"):
            rows = list(csv.DictReader(io.StringIO(shard.read_text())))
            text = io.StringIO()
            writer = csv.DictWriter(
                text,
                [f for f in FIELDS if f != "updated"],
                extrasaction="ignore",
                lineterminator="\n",
            )
            writer.writeheader()
            writer.writerows(rows)
            shard.write_text(text.getvalue(), encoding="utf-8")
        expected = "the report does not match its manifest"
    else:
        doc = json.loads(manifest.read_text())
        options = doc["report_config"]["object_metadata_report_options"]
        options["metadata_fields"] = ["bucket", "name", "size"]
        manifest.write_text(json.dumps(doc), encoding="utf-8")
        expected = "configure the report with at least name, size and updated"
    code = await gcd(
        args(gcs_server, bucket, tmp_path / "out", *source, "--safe-epoch", str(SAFE_EPOCH))
    )
    assert code == exitcodes.USAGE
    assert expected in capsys.readouterr().err
    assert gcs_server.keys(gcs_bucket) == everything


@pytest.mark.parametrize(
    ("stamp", "separator", "full_paths"),
    [
        ("%Y-%m-%dT%H:%M:%SZ", "\n", False),  # RFC 3339 without a fraction
        ("%Y-%m-%dT%H:%M:%S.%f+00:00", "\r\n", True),  # an offset; shards as full paths
        ("%Y-%m-%dT%H:%M:%S.%fZ", "|", False),  # a one-character record separator
    ],
)
def test_every_documented_report_form_reads_the_same_rows(
    spark: Any, tmp_path: Path, stamp: str, separator: str, full_paths: bool
) -> None:
    """RFC 3339 times with or without a fraction or offset, any record separator gcloud
    allows, shards named by file name or by full path: the same keys and instants."""
    moment = datetime(2026, 11, 20, 8, 30, 15, 123456, tzinfo=UTC)
    names = sorted(ELIGIBLE | {'a/b c,d"e'})
    manifest = write_report(
        tmp_path,
        "src",
        names,
        updated=moment,
        stamp=stamp,
        record_separator=separator,
        full_paths=full_paths,
    )
    rows = read_gcs_inventory(spark, manifest, expected_bucket="src").collect()
    assert sorted(r.key for r in rows) == names
    expected = moment if "%f" in stamp else moment.replace(microsecond=0)
    assert [r.last_modified_s for r in rows] == [
        pytest.approx(expected.timestamp(), abs=1e-6)
    ] * len(names)


def test_a_record_separator_spark_cannot_split_on_is_refused(tmp_path: Path) -> None:
    """A separator of two characters other than CRLF: a clear error, not wrong rows."""
    manifest = write_report(tmp_path, "src", ["k"], record_separator="\n\n")
    with pytest.raises(ConfigError, match="record_separator '\\\\n\\\\n' cannot be read"):
        GcsInventoryManifest.load(manifest)


NOWHERE = "http://127.0.0.1:1"  # nothing listens on port 1


def nowhere_args(
    out: Path, manifest: Path, credentials: str, *extra: str, command: str = "spark-sweep"
) -> list[str]:
    """Flags for a bucket at an endpoint nobody answers at, with `credentials`: a key file
    path that does not exist ("absent"), or none at all ("anonymous")."""
    access = (
        ["--gcs-anonymous"]
        if credentials == "anonymous"
        else ["--gcs-credentials-file", str(out.parent / "absent-key.json")]
    )
    return [
        command,
        "--storage",
        "gcs",
        *access,
        "--bucket",
        "l0gc-nowhere",
        "--endpoint-url",
        NOWHERE,
        "--output",
        str(out),
        "--json",
        "--grace",
        "0s",
        "--inventory",
        str(manifest),
        "--safe-epoch",
        str(SAFE_EPOCH),
        *extra,
    ]


@pytest.mark.parametrize("command", ["spark-sweep", "spark-report"])
async def test_a_dry_run_or_report_from_an_inventory_needs_no_gcs_access(
    spark: Any, tmp_path: Path, command: str
) -> None:
    """From a Storage Insights report with `--safe-epoch`, a dry run and a report make no
    GCS client, on the driver or the executors: a key file that does not exist and an
    endpoint nobody answers at do not matter, and the eligible keys are named."""
    everything = ELIGIBLE | LIVE | UNPARSABLE | OUTSIDE
    manifest = write_report(tmp_path / "inv", "l0gc-nowhere", sorted(everything))
    out = tmp_path / "out"
    extra = ("--dry-run",) if command == "spark-sweep" else ()
    assert await gcd(nowhere_args(out, manifest, "absent", *extra, command=command)) == exitcodes.OK
    if command == "spark-sweep":
        assert actions_of(out, "would_delete") == ELIGIBLE
        assert summary(out)["errors"] == 0
    else:
        report = json.loads((out / "report.json").read_text())
        assert report["garbage_objects"] == len(ELIGIBLE)


@pytest.mark.parametrize("credentials", ["absent", "anonymous"])
async def test_a_deleting_sweep_from_an_inventory_preflights_and_fails_fast(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], credentials: str
) -> None:
    """The same sweep without --dry-run checks the bucket first: a key file that cannot be
    used, or an endpoint that does not answer, exits 2 before any Spark work, naming it."""
    manifest = write_report(tmp_path / "inv", "l0gc-nowhere", sorted(ELIGIBLE))
    out = tmp_path / "out"
    started = datetime.now(UTC)
    assert await gcd(nowhere_args(out, manifest, credentials)) == exitcodes.USAGE
    assert datetime.now(UTC) - started < timedelta(seconds=30)
    expected = "absent-key.json" if credentials == "absent" else f"cannot reach {NOWHERE}"
    assert expected in capsys.readouterr().err
    assert not (out / "decisions").exists()


def test_gcs_flags_need_storage_gcs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--gcs-anonymous on an S3 job: exit 2 naming the flag and the fix."""
    code = main(
        [
            "spark-sweep",
            "--bucket",
            "b",
            "--list",
            "--gcs-anonymous",
            "--output",
            str(tmp_path / "out"),
        ]
    )
    assert code == exitcodes.USAGE
    assert "--gcs-anonymous is for Google Cloud Storage: add --storage gcs" in (
        capsys.readouterr().err
    )


# -- the emulator's deviations from GCS, pinned ------------------------------------------


def test_emulator_ignores_start_offset_and_the_executor_client_does_not_rely_on_it(
    gcs_server: LocalGcs, gcs_bucket: str
) -> None:
    """The emulator returns keys before ``startOffset``; the executors' client drops them,
    so skip-ahead never depends on the server honouring it."""
    gcs_server.seed(gcs_bucket, ["a/1", "a/2", "a/3"])
    client = GcsTarget(gcs_bucket, gcs_server.endpoint_url, anonymous=True).client(pool=1)
    status, body, _ = client.send(
        "GET",
        f"/storage/v1/b/{gcs_bucket}/o",
        "raw list",
        params={"prefix": "a/", "startOffset": "a/3"},
    )
    assert status == 200
    assert [item["name"] for item in json.loads(body)["items"]] == ["a/1", "a/2", "a/3"]
    rows, token = client.list_page("a/", after="a/2", page_token=None)
    assert ([row[0] for row in rows], token) == (["a/3"], None)
