"""GCS credentials on the Spark executors: a key / ADC file or Application Default
Credentials, resolved by google-auth in the task; the token is sent, and neither it nor
the file's secrets ever appear in an error, a log line or the command's output.

A loopback HTTP server plays both Google's OAuth token endpoint (the ADC file's
``token_uri``) and the JSON API, and records the Authorization headers it gets.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gcd.cli.main import main
from gcd.rules.backoff import Backoff
from gcd.storage.gcs.executor import GcsTarget
from l0gc import exitcodes
from l0gc.errors import StorageError

_KEY = (
    rsa.generate_private_key(public_exponent=65537, key_size=2048)
    .private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    .decode()
)
SECRETS = (_KEY.splitlines()[5], "s3cr3t-key-id", "ya29.s3cr3t-access-token")
"""A line of the private key, its id, and the access token the fake endpoint grants."""


class _Google(BaseHTTPRequestHandler):
    """/token answers a token (or 400 when `refuse`), /storage/v1/b/bkt/o a listing."""

    refuse = False
    seen: list[str] = []  # noqa: RUF012 - per-class record, reset by the fixture

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _answer(self, status: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.refuse:
            self._answer(400, {"error": "invalid_grant", "error_description": "refused"})
        else:
            self._answer(
                200, {"access_token": SECRETS[2], "expires_in": 3600, "token_type": "Bearer"}
            )

    def do_GET(self) -> None:
        self.seen.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != f"Bearer {SECRETS[2]}":
            self._answer(
                401,
                {"error": {"code": 401, "message": "no token", "errors": [{"reason": "required"}]}},
            )
            return
        self._answer(
            200, {"items": [{"name": "a/1", "size": "3", "updated": "2026-11-22T00:00:00.000Z"}]}
        )


@pytest.fixture
def google() -> Iterator[tuple[str, type[_Google]]]:
    """The fake Google on a free loopback port: (its URL, its handler class)."""
    handler = type("Google", (_Google,), {"refuse": False, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def key_file(tmp_path: Path, url: str) -> Path:
    """A service-account key file as IAM issues it, its token_uri pointing here."""
    path = tmp_path / "key.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "l0gc-test",
                "private_key_id": SECRETS[1],
                "private_key": _KEY,
                "client_email": "sweeper@l0gc-test.iam.gserviceaccount.com",
                "client_id": "1234",
                "token_uri": f"{url}/token",
            }
        ),
        encoding="utf-8",
    )
    return path


def test_a_key_file_gives_the_executors_a_token_they_send(
    google: tuple[str, type[_Google]], tmp_path: Path
) -> None:
    """--gcs-credentials-file: google-auth refreshes a token in the task, the listing
    carries it as a Bearer token."""
    url, handler = google
    target = GcsTarget("bkt", url, credentials_file=str(key_file(tmp_path, url)))
    rows, token = target.client(pool=1).list_page("a/", after=None, page_token=None)
    assert ([row[0] for row in rows], token) == (["a/1"], None)
    assert handler.seen == [f"Bearer {SECRETS[2]}"]


def test_application_default_credentials_are_found_from_the_environment(
    google: tuple[str, type[_Google]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key file given: google.auth.default finds GOOGLE_APPLICATION_CREDENTIALS."""
    url, handler = google
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file(tmp_path, url)))
    target = GcsTarget("bkt", url)
    rows, _ = target.client(pool=1).list_page("a/", after=None, page_token=None)
    assert [row[0] for row in rows] == ["a/1"]
    assert handler.seen == [f"Bearer {SECRETS[2]}"]


def test_refused_or_missing_credentials_are_clear_and_never_show_a_secret(
    google: tuple[str, type[_Google]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A token endpoint that refuses, a missing key file: StorageError NoCredentials (not
    retried) naming the file, with no secret in it, its causes or any output."""
    url, handler = google
    handler.refuse = True
    target = GcsTarget(
        "bkt", url, credentials_file=str(key_file(tmp_path, url)), backoff=Backoff(max_attempts=1)
    )
    with pytest.raises(StorageError) as refused:
        target.client(pool=1).list_page("a/", after=None, page_token=None)
    assert (refused.value.code, refused.value.retryable) == ("NoCredentials", False)
    missing = tmp_path / "nowhere.json"
    with pytest.raises(StorageError) as absent:
        GcsTarget("bkt", url, credentials_file=str(missing)).client(pool=1)
    assert absent.value.code == "NoCredentials"
    assert str(missing) in str(absent.value)
    texts = [
        str(refused.value),
        repr(refused.value),
        str(absent.value),
        caplog.text,
        *capsys.readouterr(),
    ]
    cause = refused.value.__cause__ or refused.value.__context__
    texts += [str(cause), repr(cause)] if cause is not None else []
    for secret in SECRETS:
        assert not any(secret in text for text in texts), secret
    assert handler.seen == []  # no request went out without a token


def test_the_command_never_prints_a_credential(
    spark: Any,
    google: tuple[str, type[_Google]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """spark-sweep --storage gcs --gcs-credentials-file: a missing file is exit 2 naming
    it; a key file gets a token on the driver (preflight) and in the executors' tasks
    (every request carries it), and no secret of the file or the token is printed or
    written to the summary."""
    url, handler = google
    code = main(
        [
            "spark-sweep",
            "--storage",
            "gcs",
            "--bucket",
            "bkt",
            "--endpoint-url",
            url,
            "--gcs-credentials-file",
            str(tmp_path / "missing.json"),
            "--list",
            "--safe-epoch",
            "5",
            "--output",
            str(tmp_path / "out"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == exitcodes.USAGE
    assert "missing.json" in err
    out_dir = tmp_path / "out"
    code = main(
        [
            "spark-sweep",
            "--storage",
            "gcs",
            "--bucket",
            "bkt",
            "--endpoint-url",
            url,
            "--gcs-credentials-file",
            str(key_file(tmp_path, url)),
            "--list",
            "--list-tasks",
            "2",
            "--safe-epoch",
            "5",
            "--dry-run",
            "--json",
            "--output",
            str(out_dir),
            "--log-level",
            "debug",
        ]
    )
    out2, err2 = capsys.readouterr()
    assert code == exitcodes.OK, err2[-2000:]
    assert len(handler.seen) >= 3  # the preflight and two listing tasks
    assert set(handler.seen) == {f"Bearer {SECRETS[2]}"}
    written = (out_dir / "summary.json").read_text()
    for secret in SECRETS:
        assert secret not in out + err + out2 + err2 + written, secret
