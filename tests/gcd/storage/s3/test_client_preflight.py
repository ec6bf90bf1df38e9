"""S3 misconfiguration fails fast: before any round, `gcd sweep` and `gcd daemon` list the
root once (`gcd.storage.s3.client.preflight`) and exit 2 within seconds with one line naming the
problem and the fix, instead of minutes of retries and per-prefix errors.

"Fast" is checked by what the process did, not by a stopwatch around it (a loaded
machine's interpreter start-up alone takes seconds): the requests a proxy in front of the
store saw, the tries it logged at --log-level debug, and the wait between two tries by
the timestamps of its own log lines (docs/operations.md: 3 tries, at most 0.5 s then 1 s
apart)."""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, NoCredentialsError, SSLError

from gcd.cli.main import main
from gcd.storage.s3.errors import preflight_failure
from l0gc import exitcodes
from l0gc.errors import ConfigError, StorageError
from l0lab.testing.faultproxy import FaultConfig, ThreadedFaultProxy
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.clirun import run_cli

REPO = Path(__file__).resolve().parents[4]
ROOT = "level_zero/data/"
FIRST_BACKOFF_S = 0.5
"""The longest wait after the preflight's first try (docs/operations.md)."""
LOADED_SLACK_S = 5.0
"""What a loaded machine may add to that wait and the next try (~0.05 s here)."""


def closed_port() -> int:
    """A loopback port nothing listens on: bound, then closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sweep_argv(endpoint: str, bucket: str, *extra: str) -> list[str]:
    """`gcd sweep` against `endpoint` with M given (no etcd needed)."""
    return [
        "sweep",
        "--bucket",
        bucket,
        "--endpoint-url",
        endpoint,
        "--region",
        "us-east-1",
        "--safe-epoch",
        "5",
        *extra,
    ]


def daemon_argv(endpoint: str, bucket: str) -> list[str]:
    """`gcd daemon` against `endpoint` with M given, HTTP on a free loopback port."""
    return [
        "daemon",
        "--bucket",
        bucket,
        "--endpoint-url",
        endpoint,
        "--region",
        "us-east-1",
        "--safe-epoch",
        "5",
        "--http-host",
        "127.0.0.1",
        "--http-port",
        "0",
    ]


def error_lines(err: str) -> list[str]:
    """The lines of stderr (at --log-level debug, only a retry of the preflight may be
    logged before it fails)."""
    return [line for line in err.splitlines() if line.strip()]


def log_events(lines: list[str]) -> list[dict[str, Any]]:
    """Those lines as the JSON log lines they must be."""
    assert all(line.startswith("{") for line in lines), lines
    return [json.loads(line) for line in lines]


def logged_at(event: dict[str, Any]) -> float:
    """When the process logged `event`, by its own clock."""
    return datetime.fromisoformat(event["timestamp"]).timestamp()


def gcd(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run `python -m gcd ARGV --log-level debug`, so that every retry is logged (a daemon
    that does not fail fast would run on into run_cli's time limit)."""
    done = run_cli("gcd", *argv, "--log-level", "debug", env=env, cwd=REPO)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.integration
@pytest.mark.parametrize("command", ["sweep", "daemon"])
def test_missing_bucket_exits_2_at_once_with_one_line(s3_server: LocalS3, command: str) -> None:
    """No such bucket: exit 2 before any round, one line naming the bucket and --bucket;
    the store saw the preflight's one LIST and nothing else (no retry, no round)."""
    with ThreadedFaultProxy(s3_server.endpoint_url) as proxy:
        argv = (sweep_argv if command == "sweep" else daemon_argv)(
            proxy.endpoint_url, "l0gc-no-such-bucket"
        )
        code, out, err = gcd(argv)
    assert code == exitcodes.USAGE, err
    assert proxy.proxy.requests == {"list": 1}, proxy.proxy.requests
    lines = error_lines(err)
    assert len(lines) == 1, lines  # not even a debug line of a retry
    assert lines[0].startswith(f"gcd {command}: error: bucket 'l0gc-no-such-bucket' does not exist")
    assert "--bucket" in lines[0]
    assert out == ""


@pytest.mark.integration
@pytest.mark.parametrize("command", ["sweep", "daemon"])
def test_unreachable_endpoint_exits_2_within_seconds(command: str) -> None:
    """A closed loopback port: three quick tries (two retries logged at debug, the first
    one at most 0.5 s after the first try by the process's own clock), then exit 2 with
    one line naming the endpoint and flag."""
    endpoint = f"http://127.0.0.1:{closed_port()}"
    argv = (sweep_argv if command == "sweep" else daemon_argv)(endpoint, "b")
    code, _, err = gcd(argv)
    assert code == exitcodes.USAGE, err
    *logged, line = error_lines(err)
    retries = log_events(logged)
    assert [(r["event"], r["level"], r["attempt"]) for r in retries] == [
        ("s3.preflight_retry", "debug", 1),
        ("s3.preflight_retry", "debug", 2),
    ], err
    assert logged_at(retries[1]) - logged_at(retries[0]) < FIRST_BACKOFF_S + LOADED_SLACK_S
    assert f"cannot reach the S3 endpoint {endpoint}" in line
    assert "--endpoint-url" in line


@pytest.mark.integration
def test_access_denied_on_list_names_the_permission(
    s3_server: LocalS3, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """AccessDenied on ListObjectsV2: exit 2, one line naming s3:ListBucket on the bucket;
    the preflight is the only LIST sent."""
    denied = FaultConfig(share=1.0, codes=("AccessDenied",), operations=frozenset({"list"}))
    with ThreadedFaultProxy(s3_server.endpoint_url, denied) as proxy:
        assert main(sweep_argv(proxy.endpoint_url, bucket)) == exitcodes.USAGE
        assert proxy.proxy.requests["list"] == 1
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert f"s3:ListBucket on arn:aws:s3:::{bucket}" in lines[0]


@pytest.mark.integration
def test_no_credentials_exits_2_within_seconds(s3_server: LocalS3, tmp_path: Path) -> None:
    """No AWS_* variables, empty config and credentials files, no instance metadata:
    exit 2 before sending anything (no retry), one line saying how to give credentials."""
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "L0GC_"))}
    env.update(
        HOME=str(tmp_path),
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    with ThreadedFaultProxy(s3_server.endpoint_url) as proxy:
        code, out, err = gcd(sweep_argv(proxy.endpoint_url, "b", "--json"), env)
    assert code == exitcodes.USAGE, err
    assert not proxy.proxy.requests, proxy.proxy.requests
    lines = error_lines(err)
    assert len(lines) == 1, lines  # not even a debug line of a retry
    assert "no AWS credentials found" in lines[0]
    assert "AWS_ACCESS_KEY_ID" in lines[0]
    doc = json.loads(out)  # --json: the failure as a JSON document on stdout too
    assert doc["error"] == "usage"
    assert doc["exit_code"] == exitcodes.USAGE
    assert lines[0].endswith(doc["message"])


@pytest.mark.integration
def test_namespace_bind_without_credentials_exits_2_as_sweep_does(
    s3_server: LocalS3, etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    """Issue 55: `namespace bind` exited 1 where `gcd sweep` exits 2 for the same missing
    credentials; it runs the same preflight now: exit 2, the same one line, nothing sent."""
    (tmp_path / "config").write_text("")
    (tmp_path / "credentials").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "L0GC_"))}
    env.update(
        HOME=str(tmp_path),
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    with ThreadedFaultProxy(s3_server.endpoint_url) as proxy:
        done = run_cli(
            "watermark",
            "namespace",
            "bind",
            "--bucket",
            "b",
            "--endpoint-url",
            proxy.endpoint_url,
            "--region",
            "us-east-1",
            "--etcd",
            etcd_server.endpoint,
            "--namespace",
            namespace,
            env=env,
            cwd=REPO,
        )
    assert done.returncode == exitcodes.USAGE, done.stderr
    assert not proxy.proxy.requests, proxy.proxy.requests
    lines = error_lines(done.stderr)
    assert len(lines) == 1, lines
    assert "no AWS credentials found" in lines[0]


def client_error(code: str, status: int, **extra: object) -> ClientError:
    """A ClientError as botocore raises it for an S3 error answer."""
    response: dict[str, object] = {
        "Error": {"Code": code, "Message": f"{code} message", **extra},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
    }
    return ClientError(response, "ListObjectsV2")  # type: ignore[arg-type, unused-ignore]


@pytest.mark.parametrize(
    ("exc", "kind", "retry", "words"),
    [
        (NoCredentialsError(), ConfigError, False, "no AWS credentials found"),
        (client_error("NoSuchBucket", 404), ConfigError, False, "does not exist"),
        (client_error("AccessDenied", 403), ConfigError, False, "s3:ListBucket"),
        (client_error("InvalidAccessKeyId", 403), ConfigError, False, "rejected the credentials"),
        (
            client_error("AuthorizationHeaderMalformed", 400, Region="eu-west-1"),
            ConfigError,
            False,
            "pass --region eu-west-1",
        ),
        (client_error("PermanentRedirect", 301), ConfigError, False, "another region"),
        (client_error("SlowDown", 503), StorageError, True, "try again later"),
        (ConnectionRefusedError("refused"), ConfigError, True, "cannot reach the S3 endpoint"),
        (
            SSLError(endpoint_url="https://s3.test", error=OSError("self-signed")),
            ConfigError,
            False,
            "failed TLS verification (self-signed): if a private CA",
        ),
    ],
)
def test_each_misconfiguration_gets_its_own_message(
    exc: BaseException, kind: type[Exception], retry: bool, words: str
) -> None:
    """The preflight names the problem: credentials, bucket, permission, region, endpoint;
    only the endpoint and throttling are worth another try."""
    problem, may_retry = preflight_failure(exc, "b", ROOT, "http://s3.test", "us-east-1")
    assert type(problem) is kind
    assert may_retry is retry
    assert words in str(problem)
