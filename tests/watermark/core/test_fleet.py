"""`--fleet-urls` patterns: CIDR, IP, DNS names with '*' labels, any host; ports."""

from __future__ import annotations

import pytest

from l0gc.errors import ConfigError
from watermark.core.fleet import FleetUrls

FLEET = FleetUrls.parse(
    "http://10.244.0.0/16:8080, https://*.peers.l0gc.svc:8443,http://[fd00::/8]:*"
)


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("http://10.244.3.4:8080", True),
        ("http://10.245.3.4:8080", False),  # outside the CIDR
        ("http://10.244.3.4:8081", False),  # another port
        ("https://10.244.3.4:8080", False),  # another scheme
        ("https://p-1.peers.l0gc.svc:8443", True),
        ("https://a.b.peers.l0gc.svc:8443", False),  # '*' is one label
        ("https://peers.l0gc.svc.evil.example:8443", False),
        ("http://10.244.evil.example:8080", False),  # a name never matches a CIDR
        ("http://[fd00::1]:9999", True),
        ("http://attacker:29999", False),
    ],
)
def test_an_address_is_in_the_fleet_only_if_a_pattern_matches(address: str, allowed: bool) -> None:
    assert FLEET.allows(address) is allowed


def test_the_default_is_this_port_anywhere_or_this_host_on_any_port() -> None:
    fleet = FleetUrls.default_for("http://10.0.0.5:8080")
    assert fleet.allows("http://10.0.0.9:8080")
    assert fleet.allows("http://10.0.0.5:9000")
    assert not fleet.allows("http://10.0.0.9:29999")
    assert not fleet.allows("https://10.0.0.9:8080")
    assert FleetUrls.default_for("https://[::1]:8443").allows("https://[::1]:1")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("", "is empty"),
        ("ftp://x", "not SCHEME://HOST[:PORT]"),
        ("http://x:70000", "outside 1-65535"),
        ("http://10.0.0.0/33:80", "not an IP address or CIDR"),
        ("http://a_b.example", "not SCHEME://HOST[:PORT]"),
    ],
)
def test_a_bad_pattern_is_refused_naming_it(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match="--fleet-urls") as caught:
        FleetUrls.parse(spec)
    assert says in str(caught.value)
