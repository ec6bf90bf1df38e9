"""Which addresses belong to the replica fleet (`serve --replicated --fleet-urls`); pure.

Design notes: docs/internals/publisher.md, `watermark.core.fleet`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from l0gc.errors import ConfigError

__all__ = ["FleetUrls"]

_PATTERN = re.compile(
    r"(?P<scheme>https?)://(?P<host>\[[0-9A-Fa-f:./]+\]|[A-Za-z0-9.\-*/]+)(?::(?P<port>[0-9]{1,5}|\*))?"
)
_LABEL = re.compile(r"[A-Za-z0-9\-]{1,63}|\*")
_DEFAULT_PORTS = {"http": 80, "https": 443}
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class _Pattern:
    scheme: str
    network: IpNetwork | None  # a CIDR or IP literal host
    labels: tuple[str, ...]  # a DNS name host ("*" = any one label); () with network
    any_host: bool
    port: int | None  # None: any port

    def allows(self, scheme: str, host: str, port: int) -> bool:
        if scheme != self.scheme or (self.port is not None and port != self.port):
            return False
        if self.any_host:
            return True
        if self.network is not None:
            try:
                return ipaddress.ip_address(host) in self.network
            except ValueError:
                return False
        labels = host.lower().split(".")
        return len(labels) == len(self.labels) and all(
            want in ("*", got) for want, got in zip(self.labels, labels, strict=True)
        )


def _parse_one(text: str, what: str) -> _Pattern:
    match = _PATTERN.fullmatch(text)
    problem = "not SCHEME://HOST[:PORT]"
    if match is not None:
        scheme, host, port_text = match["scheme"], match["host"].strip("[]"), match["port"]
        port = None if port_text == "*" else int(port_text or _DEFAULT_PORTS[scheme])
        if port is not None and not 0 < port < 65536:
            problem = f"port {port} is outside 1-65535"
        elif host == "*":
            return _Pattern(scheme, None, (), True, port)
        elif "/" in host or ":" in host or host.replace(".", "").isdigit():
            try:
                network = ipaddress.ip_network(host, strict=False)
            except ValueError:
                problem = f"host {host!r} is not an IP address or CIDR network"
            else:
                return _Pattern(scheme, network, (), False, port)
        else:
            labels = tuple(host.lower().split("."))
            if all(_LABEL.fullmatch(label) for label in labels):
                return _Pattern(scheme, None, labels, False, port)
            problem = f"host {host!r} is not a DNS name (a label '*' matches any one label)"
    raise ConfigError(
        f"{what} entry {text[:100]!r}: {problem}; give SCHEME://HOST[:PORT] entries "
        "separated by commas, HOST an IP, a CIDR network (10.244.0.0/16), a DNS name with "
        "'*' labels (*.peers.l0gc.svc) or '*', PORT a number or '*'"
    )


class FleetUrls:
    """The fleet's allowed replica addresses (see the module docstring)."""

    def __init__(self, patterns: tuple[_Pattern, ...], spec: str) -> None:
        self._patterns = patterns
        self.spec = spec

    @classmethod
    def parse(cls, spec: str, *, what: str = "--fleet-urls") -> FleetUrls:
        """Parse a comma-separated list; ConfigError names a bad entry (and `what`, the
        setting it came from)."""
        entries = [entry.strip() for entry in spec.split(",") if entry.strip()]
        if not entries:
            raise ConfigError(
                f"{what} is empty: give the addresses replicas advertise, e.g. "
                "http://10.244.0.0/16:8080"
            )
        return cls(tuple(_parse_one(entry, what) for entry in entries), ",".join(entries))

    @classmethod
    def default_for(cls, address: str) -> FleetUrls:
        """The default without --fleet-urls, from this replica's `address`: its scheme,
        and its port on any host or its host on any port (replicas on one machine)."""
        parts = urlsplit(address)
        port = parts.port or _DEFAULT_PORTS[parts.scheme]
        host = parts.hostname or ""
        shown = f"[{host}]" if ":" in host else host
        return cls.parse(f"{parts.scheme}://*:{port},{parts.scheme}://{shown}:*")

    def allows(self, address: str) -> bool:
        """True if `address` (a plain http(s)://HOST[:PORT] URL) matches a pattern."""
        try:
            parts = urlsplit(address)
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 0)
        except ValueError:
            return False
        host = parts.hostname or ""
        return any(p.allows(parts.scheme, host, port) for p in self._patterns)

    def __repr__(self) -> str:
        return f"FleetUrls({self.spec!r})"
