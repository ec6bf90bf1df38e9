"""The GCS emulator (PyPI `gcp-storage-emulator`, pinned) on loopback, for tests, the demo
and benchmarks.

`LocalGcs` starts it in memory on a free 127.0.0.1 port through
`gcd.testing.gcs_emulator` (which adds the batch Content-IDs GCS sends; with
``content_ids=False`` the emulator runs unchanged), waits until it answers, and stops it
by its PID. It takes no credentials: clients connect with `GcsSettings(anonymous=True)`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcd.testing.local_servers import free_port, stop_process
from watermark.errors import ConfigError

__all__ = ["LocalGcs"]

_START_TIMEOUT_S = 30.0


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
        module = "gcd.testing.gcs_emulator" if self.content_ids else "gcp_storage_emulator"
        cmd = [sys.executable, "-m", module, "start", "--host", "127.0.0.1",
               "--port", str(self.port), "--in-memory"]  # fmt: skip
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
                urllib.request.urlopen(f"{self.endpoint_url}/storage/v1/b?project=l0gc",  # noqa: S310
                                       timeout=0.5).close()  # fmt: skip
                return self
            time.sleep(0.1)
        self.stop()
        raise ConfigError(f"the GCS emulator did not answer on 127.0.0.1:{self.port} in "
                          f"{_START_TIMEOUT_S:g} s")  # fmt: skip

    def create_bucket(self, name: str) -> None:
        """Create bucket `name` (the emulator's buckets.insert)."""
        request = urllib.request.Request(  # noqa: S310 - loopback
            f"{self.endpoint_url}/storage/v1/b?project=l0gc", method="POST",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310 - loopback
            pass

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
