"""The GCS emulator (PyPI `gcp-storage-emulator`, pinned) on loopback, for tests, the demo
and benchmarks.

`LocalGcs` starts it in memory on a free 127.0.0.1 port through
`l0lab.testing.gcs_emulator` (which adds the batch Content-IDs GCS sends; with
``content_ids=False`` the emulator runs unchanged), waits until it answers, and stops it
by its PID. It takes no credentials: clients connect with `GcsSettings(anonymous=True)`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from l0gc.errors import ConfigError
from l0lab.testing.local_servers import free_port, stop_process

__all__ = ["LocalGcs"]

_START_TIMEOUT_S = 30.0
_SEED_BUCKET = "l0gc-seed-source"


@dataclass(slots=True)
class LocalGcs:
    """The emulator on a free loopback port."""

    content_ids: bool = True
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_dir: Path | None = None
    _log: Any = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        """The JSON API root (``--endpoint-url``)."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalGcs:
        """Start the emulator and wait until it answers a bucket listing."""
        if self.process is not None:
            return self
        self.log_dir = Path(tempfile.mkdtemp(prefix="l0gc-gcs-"))
        self.port = free_port()
        module = "l0lab.testing.gcs_emulator" if self.content_ids else "gcp_storage_emulator"
        cmd = [
            sys.executable,
            "-m",
            module,
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--in-memory",
        ]
        self._log = (self.log_dir / "gcs.log").open("ab")
        self.process = subprocess.Popen(  # noqa: S603 - our own pinned tool
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.log_dir / "gcs.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise ConfigError(f"the GCS emulator exited at start:\n{log}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(  # noqa: S310 - a loopback http URL we built
                    f"{self.endpoint_url}/storage/v1/b?project=l0gc",
                    timeout=0.5,
                ).close()
                return self
            time.sleep(0.1)
        self.stop()
        raise ConfigError(
            f"the GCS emulator did not answer on 127.0.0.1:{self.port} in {_START_TIMEOUT_S:g} s"
        )

    def create_bucket(self, name: str) -> None:
        """Create bucket `name` (the emulator's buckets.insert)."""
        request = urllib.request.Request(  # noqa: S310 - loopback
            f"{self.endpoint_url}/storage/v1/b?project=l0gc",
            method="POST",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310 - loopback
            pass

    def _request(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers={"Content-Type": content_type})
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    def _batch(self, lines: list[str]) -> None:
        for start in range(0, len(lines), 100):
            parts = [
                f"--S\r\nContent-Type: application/http\r\nContent-ID: <s{i}>\r\n\r\n"
                f"{line} HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{{}}\r\n"
                for i, line in enumerate(lines[start : start + 100])
            ]
            body = ("".join(parts) + "--S--\r\n").encode()
            status, answer = self._request(
                "POST", "/batch/storage/v1", body, "multipart/mixed; boundary=S"
            )
            if status != 200 or b"HTTP/1.1 4" in answer or b"HTTP/1.1 5" in answer:
                raise ConfigError(f"the GCS emulator refused a seeding batch: {answer[:300]!r}")

    def seed(self, bucket: str, keys: list[str]) -> None:
        """Create one small object per key, fast: batches of copies of one object."""
        status, _ = self._request("GET", f"/storage/v1/b/{_SEED_BUCKET}")
        if status == 404:
            self.create_bucket(_SEED_BUCKET)
            self._request(
                "POST",
                f"/upload/storage/v1/b/{_SEED_BUCKET}/o?uploadType=media&name=seed",
                b"x",
                "application/octet-stream",
            )
        self._batch(
            [
                f"POST /storage/v1/b/{_SEED_BUCKET}/o/seed/copyTo/b/{bucket}/o/"
                f"{urllib.parse.quote(key, safe='')}"
                for key in keys
            ]
        )

    def keys(self, bucket: str) -> set[str]:
        """Every object name in `bucket`."""
        names: set[str] = set()
        token = ""
        while True:
            query = "" if not token else "?" + urllib.parse.urlencode({"pageToken": token})
            status, body = self._request("GET", f"/storage/v1/b/{bucket}/o{query}")
            if status != 200:
                raise ConfigError(f"listing {bucket} on the GCS emulator: HTTP {status}")
            doc = json.loads(body)
            names.update(item["name"] for item in doc.get("items", ()))
            token = doc.get("nextPageToken") or ""
            if not token:
                return names

    def empty(self, bucket: str) -> None:
        """Delete every object of `bucket` (keeps the emulator's memory and time small)."""
        self._batch(
            [
                f"DELETE /storage/v1/b/{bucket}/o/{urllib.parse.quote(key, safe='')}"
                for key in sorted(self.keys(bucket))
            ]
        )

    def stop(self) -> None:
        """SIGTERM by PID (SIGKILL after 5 s); remove the log directory."""
        if self.process is not None:
            proc, self.process = self.process, None
            stop_process(proc, 5.0)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.log_dir is not None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.log_dir = None

    def __enter__(self) -> LocalGcs:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
