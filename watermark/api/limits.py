"""What a client of the publisher API may take (`HttpLimits`) and the defaults.

Plain values, no aiohttp: `watermark.api.http_server` enforces them, and the `watermark
serve` flags (`watermark.cli.serve`) name their defaults without importing the server,
so the admin commands (`watermark epoch`, `watermark partition`) start without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from l0gc.errors import ConfigError

__all__ = [
    "DEFAULT_HEAD_TIMEOUT_S",
    "DEFAULT_MAX_BATCH_BODY_BYTES",
    "DEFAULT_MAX_BATCH_ENTRIES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS_PER_PEER",
    "DEFAULT_PROBE_RESERVE",
    "DEFAULT_READ_TIMEOUT_S",
    "HttpLimits",
]

DEFAULT_MAX_BODY_BYTES = 64 * 1024
DEFAULT_MAX_BATCH_ENTRIES = 1000
DEFAULT_MAX_BATCH_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_READ_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS_PER_PEER = 256
DEFAULT_HEAD_TIMEOUT_S = 5.0
DEFAULT_PROBE_RESERVE = 16


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What a client of the API may take: connections, time to send a request, body size."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    max_connections_per_peer: int = DEFAULT_MAX_CONNECTIONS_PER_PEER
    """Connections one client address may hold open at once."""
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    """How long a new connection may take to send its first request head (at most
    `read_timeout_s`: the smaller one applies)."""
    probe_reserve: int = DEFAULT_PROBE_RESERVE
    """Connections beyond `max_connections` kept for probes (GET /healthz, /readyz, /metrics)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_batch_entries: int = DEFAULT_MAX_BATCH_ENTRIES
    """Entries one batched fence or commit request may carry."""
    max_batch_body_bytes: int = DEFAULT_MAX_BATCH_BODY_BYTES
    """Body limit of the two batch routes (every other route: `max_body_bytes`)."""

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ConfigError(
                f"--max-connections must be >= 1, got {self.max_connections}; it caps the "
                "connections the API keeps open at once"
            )
        if not self.read_timeout_s > 0:
            raise ConfigError(
                f"--http-read-timeout must be > 0 seconds, got {self.read_timeout_s}; it bounds "
                "how long a client may take to send a request"
            )
        if self.max_connections_per_peer < 1:
            raise ConfigError(
                f"--max-connections-per-peer must be >= 1, got {self.max_connections_per_peer}"
            )
        if not self.head_timeout_s > 0:
            raise ConfigError(
                f"--http-head-timeout must be > 0 seconds, got {self.head_timeout_s}; it bounds "
                "how long a new connection may take to send its request head"
            )
        if self.probe_reserve < 0:
            raise ConfigError(f"probe_reserve must be >= 0, got {self.probe_reserve}")
        if self.max_body_bytes < 1:
            raise ConfigError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")
        if self.max_batch_entries < 1 or self.max_batch_body_bytes < self.max_body_bytes:
            raise ConfigError(
                f"max_batch_entries ({self.max_batch_entries}) must be >= 1 and "
                f"max_batch_body_bytes ({self.max_batch_body_bytes}) >= max_body_bytes"
            )
