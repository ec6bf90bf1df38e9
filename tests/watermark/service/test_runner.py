"""`PublisherRunner` on a real etcd, with a recording front: what it opens, and that it
closes everything in order (the listeners before the final publish, the liveness key
after it, etcd last), on SIGTERM and when start-up fails."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from collections.abc import Callable, Iterator

import pytest

from l0gc.errors import ConfigError, PartitionNotRegistered
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0gc.etcd.store import WatermarkStore
from l0lab.testing.local_servers import LocalEtcd
from tests.waiting import wait_until
from watermark.service.publisher import Publisher
from watermark.service.replicas import ReplicaSet
from watermark.service.runner import PublisherRunner, RunnerSettings

pytestmark = pytest.mark.integration


class RecordingFront:
    """A `Front` that serves nothing and writes down what the runner asked of it, with
    what etcd held at that moment."""

    def __init__(self, namespace: str, etcd: EtcdSettings, *, fail_open: bool = False) -> None:
        self.calls: list[str] = []
        self.namespace, self.etcd, self.fail_open = namespace, etcd, fail_open
        self.ready: Callable[[], bool] | None = None
        self.liveness_keys_at_close: int | None = None

    @property
    def tls(self) -> bool:
        return False

    async def bind(
        self, publisher: Publisher, ready: Callable[[], bool], router: ReplicaSet | None
    ) -> int:
        self.calls.append("bind")
        self.ready = ready
        return 8080

    async def open(self) -> None:
        self.calls.append("open")
        if self.fail_open:
            raise ConfigError("cannot listen: simulated")

    async def close(self) -> None:
        self.calls.append("close")
        self.liveness_keys_at_close = len(await liveness_keys(self.etcd, self.namespace))

    def reload(self) -> None:
        self.calls.append("reload")


SETTINGS = RunnerSettings(
    owner_id="runner-test",
    partitions=("p0",),
    register=True,
    take_over=False,
    publish_interval_s=0.05,
    idle_advance=True,
    hold_ttl_s=5.0,
    fence_timeout_s=1.0,
    drain_timeout_s=0.5,
    tick_interval_s=0.0,
    ticker_lease_ttl_s=5,
    member_lease_ttl_s=30,
    http_host="127.0.0.1",
)
"""`serve --partitions p0 --register` with quick intervals. The liveness lease is long:
a 2 s one can lapse while a loaded machine starves the keepalive (the runner then stops
with an error), and the tests release it, never wait for it to expire."""


@pytest.fixture
def own_signals() -> Iterator[None]:
    """The runner installs (and removes) loop handlers: give this worker its own back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


async def liveness_keys(etcd: EtcdSettings, namespace: str) -> list[str]:
    """The liveness keys under {ns}/owners/."""
    kv = await open_kv(etcd)
    try:
        return [item.key for item in (await kv.range_prefix(f"{namespace}/owners/")).items]
    finally:
        await kv.close()


async def test_sigterm_stops_the_runner_in_order_and_releases_everything(
    etcd_server: LocalEtcd, namespace: str, own_signals: None
) -> None:
    """SIGTERM: the front is closed while the partition is still owned, then the final
    publish is written and the liveness key released; SIGHUP reloads the front."""
    etcd = EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace)
    front = RecordingFront(namespace, etcd)
    runner = PublisherRunner(SETTINGS, etcd, front)
    running = asyncio.create_task(runner.run())
    await wait_until(
        lambda: front.ready is not None and front.ready(), timeout_s=60, what="the runner ready"
    )
    assert front.calls == ["bind", "open"]
    assert len(await liveness_keys(etcd, namespace)) == 1  # the liveness key is held
    os.kill(os.getpid(), signal.SIGHUP)
    await wait_until(lambda: "reload" in front.calls, timeout_s=60, what="SIGHUP handled")
    os.kill(os.getpid(), signal.SIGTERM)
    result = await asyncio.wait_for(running, timeout=60)
    assert result == {"stopped": True, "owner": "runner-test", "partitions": ["p0"]}
    assert front.calls == ["bind", "open", "reload", "close"]
    assert front.liveness_keys_at_close == 1  # the listeners closed before the release
    assert front.ready is not None
    assert not front.ready()  # readiness turned 503 first
    assert await liveness_keys(etcd, namespace) == []  # released after the final publish
    kv = await open_kv(etcd)
    try:
        record = await WatermarkStore(kv, namespace).get_partition("p0")
    finally:
        await kv.close()
    assert record is not None
    assert record.owner == "runner-test"


async def test_a_start_that_fails_closes_the_front_and_releases_the_liveness_key(
    etcd_server: LocalEtcd, namespace: str, own_signals: None
) -> None:
    """A front that cannot open: the error comes out, the front is closed and the
    liveness key taken for the start is released."""
    etcd = EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace)
    front = RecordingFront(namespace, etcd, fail_open=True)
    with pytest.raises(ConfigError, match="simulated"):
        await PublisherRunner(SETTINGS, etcd, front).run()
    assert front.calls == ["bind", "open", "close"]
    assert front.liveness_keys_at_close == 1  # the front closed first, then the release
    assert await liveness_keys(etcd, namespace) == []


async def test_an_unregistered_partition_stops_the_start_before_any_listener(
    etcd_server: LocalEtcd, namespace: str, own_signals: None
) -> None:
    """Without --register an unregistered partition is refused before the front binds:
    nothing was opened, nothing written."""
    etcd = EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace)
    front = RecordingFront(namespace, etcd)
    with pytest.raises(PartitionNotRegistered):
        await PublisherRunner(dataclasses.replace(SETTINGS, register=False), etcd, front).run()
    assert front.calls == []
    assert await liveness_keys(etcd, namespace) == []
