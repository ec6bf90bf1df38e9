"""`gcd sweep` against an https:// S3 endpoint whose certificate a private CA signed, as
a MinIO or an S3 gateway inside a company is: every connection (the preflight's, the
store's, the lean path's) trusts `AWS_CA_BUNDLE`, as botocore does, and the lean path
arms over TLS. Without that CA the start is refused and nothing is deleted.

A real process on a real TLS server (the lean in-memory one, `l0lab.testing.lean_s3`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gcd.rules.layout import KeyLayout
from l0gc import exitcodes
from l0lab.testing.lean_s3 import LeanS3
from l0lab.testing.pki import issue

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[4]
BUCKET = "tls-bucket"
LAYOUT = KeyLayout.default("level_zero/data")
GARBAGE = [LAYOUT.format(p, e, "g") for p in (1, 2, 3) for e in range(1, 6)]
LIVE = [LAYOUT.format(p, 9, "live") for p in (1, 2, 3)]


@pytest.fixture
def https_s3(tmp_path: Path) -> Iterator[LeanS3]:
    issue(tmp_path, "server", issue(tmp_path, "ca", None))
    issue(tmp_path, "other-ca", None)
    tls = (tmp_path / "server.pem", tmp_path / "server-key.pem", tmp_path / "ca.pem")
    with LeanS3(tls=tls) as server:
        server.load(BUCKET, [*GARBAGE, *LIVE], datetime.now(UTC) - timedelta(hours=2))
        yield server


def sweep(server: LeanS3, ca_bundle: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CA_BUNDLE": str(ca_bundle),
    }
    store = ["--bucket", BUCKET, "--endpoint-url", server.endpoint_url, "--region", "us-east-1"]
    rest = ["--safe-epoch", "5", "--grace", "1m", "--json", "--log-level", "debug"]
    return subprocess.run(
        [sys.executable, "-m", "gcd", "sweep", *store, *rest],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def test_a_sweep_over_https_trusts_the_ca_bundle_and_arms_the_lean_path(
    https_s3: LeanS3, tmp_path: Path
) -> None:
    assert https_s3.endpoint_url.startswith("https://")
    run = sweep(https_s3, tmp_path / "ca.pem")
    assert run.returncode == exitcodes.OK, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    assert summary["deleted"] == len(GARBAGE)
    assert "s3.lean_armed" in run.stderr
    assert "s3.lean_disarmed" not in run.stderr
    assert https_s3.keys(BUCKET) == set(LIVE)


def test_a_server_the_ca_bundle_does_not_vouch_for_is_refused(
    https_s3: LeanS3, tmp_path: Path
) -> None:
    run = sweep(https_s3, tmp_path / "other-ca.pem")
    assert run.returncode == exitcodes.USAGE, run.stderr[-3000:]
    assert "failed TLS verification (unable to get local issuer certificate)" in run.stderr
    assert "set AWS_CA_BUNDLE" in run.stderr
    assert https_s3.count(BUCKET) == len(GARBAGE) + len(LIVE)
