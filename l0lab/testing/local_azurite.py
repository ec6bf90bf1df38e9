"""Azurite (Microsoft's Azure Storage emulator) on loopback, for tests and benchmarks.

`scripts/install-azurite.sh` (run by the bootstrap) installs the pinned npm package into
`.tools/azurite`; `LocalAzurite` starts its blob service on a free 127.0.0.1 port with a
temporary data directory, waits until it answers, and stops it by its PID. The account
is Azurite's published development account (`devstoreaccount1`), whose well-known key
is no secret; the connection string is written to a file, as an operator gives one.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from l0gc.errors import ConfigError
from l0lab.testing.local_servers import free_port, stop_process

__all__ = ["DEV_ACCOUNT", "LocalAzurite", "azurite_binary"]

DEV_ACCOUNT = "devstoreaccount1"
_DEV_KEY = (  # Azurite's documented development key (public, emulator only)
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
_START_TIMEOUT_S = 30.0


def azurite_binary() -> Path:
    """`.tools/azurite/node_modules/.bin/azurite-blob` of this repository."""
    found = Path(__file__).resolve().parents[2] / ".tools/azurite/node_modules/.bin/azurite-blob"
    if not found.exists():
        raise ConfigError(
            "Azurite is not installed: run scripts/install-azurite.sh (the bootstrap does)"
        )
    return found


@dataclass(slots=True)
class LocalAzurite:
    """Azurite's blob service on a free loopback port."""

    port: int = 0
    data_dir: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    _log: Any = field(default=None, repr=False)

    @property
    def account_url(self) -> str:
        """The blob endpoint (path-style: the account is the first path segment)."""
        return f"http://127.0.0.1:{self.port}/{DEV_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        """The development account's connection string for this endpoint."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};"
            f"AccountKey={_DEV_KEY};BlobEndpoint={self.account_url};"
        )

    def write_connection_string(self, path: Path) -> Path:
        """Write the connection string to `path` (mode 0600), as an operator would."""
        path.write_text(self.connection_string + "\n", encoding="utf-8")
        path.chmod(0o600)
        return path

    def start(self) -> LocalAzurite:
        """Start the blob service and wait until its port accepts connections."""
        if self.process is not None:
            return self
        self.data_dir = Path(tempfile.mkdtemp(prefix="l0gc-azurite-"))
        self.port = free_port()
        cmd = [
            str(azurite_binary()),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(self.port),
            "--location",
            str(self.data_dir),
            "--silent",
            "--skipApiVersionCheck",
            "--loose",
        ]
        self._log = (self.data_dir / "azurite.log").open("ab")
        self.process = subprocess.Popen(  # noqa: S603 - our own pinned tool
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.data_dir / "azurite.log").read_text(errors="replace")[-2000:]
                self.stop()
                raise ConfigError(f"azurite exited at start:\n{log}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return self
            time.sleep(0.1)
        self.stop()
        raise ConfigError(
            f"azurite did not listen on 127.0.0.1:{self.port} in {_START_TIMEOUT_S:g} s"
        )

    def stop(self) -> None:
        """SIGTERM by PID (SIGKILL after 5 s); remove the data directory."""
        if self.process is not None:
            proc, self.process = self.process, None
            stop_process(proc, 5.0)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def __enter__(self) -> LocalAzurite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
