"""`watermark serve --replicated`: its options are checked before etcd, and one replica
process on a real etcd owns its partitions, answers the owner route, and on SIGTERM
releases everything (claims and member record gone) and exits 0."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest

from l0gc.errors import ConfigError
from l0gc.etcd.settings import EtcdSettings, open_kv
from l0lab.testing.local_servers import LocalEtcd
from tests.serving import new_serve
from watermark.cli.main import parse
from watermark.service.replicas import advertised_url

ETCD = {"L0GC_ETCD": "127.0.0.1:2379"}


def test_replica_options_are_read_and_checked_before_etcd() -> None:
    """Durations as elsewhere; a lease shorter than 2 s, an interval above half the TTL
    and an advertise URL with a path are usage errors naming the flag."""
    invocation = parse(
        [
            "serve",
            "--replicated",
            "--member-lease-ttl",
            "10s",
            "--membership-interval",
            "1s",
            "--advertise-url",
            "https://10.0.0.5:8443",
        ],
        ETCD,
    )
    args = invocation.args
    assert (args.replicated, args.member_lease_ttl, args.membership_interval) == (True, 10, 1.0)
    assert args.advertise_url == "https://10.0.0.5:8443"
    with pytest.raises(ConfigError, match="--membership-interval"):
        parse(["serve", "--replicated", "--membership-interval", "4s"], ETCD)
    with pytest.raises(ConfigError, match="--advertise-url"):
        parse(["serve", "--replicated", "--advertise-url", "http://10.0.0.5:8080/api"], ETCD)
    with pytest.raises(ConfigError, match="--member-lease-ttl"):
        parse(["serve", "--replicated", "--member-lease-ttl", "1s"], ETCD)
    with pytest.raises(ConfigError, match="--owner-id"):
        parse(["serve", "--replicated", "--owner-id", "pod 1"], ETCD)
    assert parse(["serve", "--advertise-url", "junk"], ETCD).args.replicated is False


def test_the_default_address_names_this_host_when_listening_everywhere() -> None:
    """A wildcard host is replaced by the host's name; IPv6 literals are bracketed."""
    assert advertised_url("127.0.0.1", 8080, tls=False) == "http://127.0.0.1:8080"
    assert advertised_url("::1", 8443, tls=True) == "https://[::1]:8443"
    assert not advertised_url("0.0.0.0", 8080, tls=False).startswith("http://0.0.0.0")


@pytest.mark.integration
async def test_one_replica_owns_everything_and_releases_it_on_sigterm(
    etcd_server: LocalEtcd, namespace: str, tmp_path: Path
) -> None:
    """Alone, a replica claims and serves every partition; its owner route says so;
    SIGTERM leaves no claim and no member record behind, and it exits 0."""
    serve = new_serve(
        etcd_server,
        namespace,
        tmp_path / "solo.log",
        "--replicated",
        "--register",
        "--member-lease-ttl",
        "2",
        "--membership-interval",
        "0.2",
        "--drain-timeout",
        "0.5",
        partitions=("p/0-3",),
        owner="solo",
    ).start()
    try:
        url = serve.url
        await asyncio.to_thread(serve.wait_ready)
        with urllib.request.urlopen(f"{url}/v1/partitions/p%2F2/owner", timeout=5) as answer:
            owner = json.load(answer)
        assert (owner["owner"], owner["address"], owner["local"]) == ("solo", url, True)
        kv = await open_kv(EtcdSettings(endpoints=(etcd_server.endpoint,), namespace=namespace))
        try:
            held = await kv.range_prefix(f"{namespace}/replicas/")
            assert len(held.items) == 5  # the member record and four claims
            assert await asyncio.to_thread(serve.stop, 30.0) == 0
            assert (await kv.range_prefix(f"{namespace}/replicas/")).items == ()
        finally:
            await kv.close()
    finally:
        serve.stop(5.0)
