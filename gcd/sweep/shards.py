"""Shard agreement: running sweepers announce their shard, and refuse to delete on a mismatch.

Design notes: docs/internals/sweep.md, `gcd.sweep.shards`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from l0gc import strictjson
from l0gc.contract.kv import KV
from l0gc.errors import L0gcError
from l0gc.etcd.session import LeaseSession
from l0gc.etcd.store import WatermarkStore

__all__ = [
    "DEFAULT_TTL_S",
    "MAX_PROBLEMS",
    "ShardAnnouncement",
    "announced",
    "announcement",
    "check_shards",
    "fleet_problem",
    "new_sweeper_id",
    "problems_of",
]

DEFAULT_TTL_S = 15
MAX_PROBLEMS = 8
_MAX_PROBLEM_CHARS = 300
_VERSION = 1
_MAX_BYTES = 4096
log = structlog.get_logger("gcd.shards")


def new_sweeper_id() -> str:
    """hostname-pid-random: unique per process, readable in `gcd status`."""
    host = "".join(ch if "!" <= ch <= "~" and ch != "/" else "_" for ch in socket.gethostname())
    return f"{host[:100]}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class ShardAnnouncement:
    """One running sweeper's shard."""

    sweeper_id: str
    shard_index: int
    shard_count: int
    started_at: float
    store: Mapping[str, str | bool | None] | None = None
    """What the sweeper detected about its bucket (see the module docstring), if known."""
    problems: tuple[str, ...] = ()
    """What its last round could not collect, one short line each (at most `MAX_PROBLEMS`)."""
    max_deletes_per_second: float | None = None
    """Its delete rate (None: unlimited): the namespace's budget is the sum, which a
    Spark job takes over while it runs (`gcd.spark.budget`)."""

    def encode(self) -> bytes:
        """Compact JSON."""
        doc: dict[str, Any] = {
            "version": _VERSION,
            "sweeper_id": self.sweeper_id,
            "shard_index": self.shard_index,
            "shard_count": self.shard_count,
            "started_at": self.started_at,
        }
        if self.store is not None:
            doc["store"] = dict(self.store)
        if self.problems:
            doc["problems"] = list(self.problems)
        if self.max_deletes_per_second is not None:
            doc["max_deletes_per_second"] = self.max_deletes_per_second
        text = strictjson.dumps(doc, what="shard announcement", sort_keys=True, compact=True)
        return text.encode()

    @classmethod
    def decode(cls, raw: bytes) -> ShardAnnouncement:
        """Parse an announcement; ValueError says what is wrong."""
        doc = strictjson.loads(raw, what="shard announcement", max_bytes=_MAX_BYTES, max_depth=2)
        if not isinstance(doc, dict) or doc.get("version") != _VERSION:
            raise ValueError("announcement is not a version 1 object")
        index, count = doc.get("shard_index"), doc.get("shard_count")
        sweeper_id, started = doc.get("sweeper_id"), doc.get("started_at")
        if type(index) is not int or type(count) is not int or not 0 <= index < count:
            raise ValueError(f"announcement has shard {index!r}/{count!r}")
        if not isinstance(sweeper_id, str) or not isinstance(started, int | float):
            raise ValueError("announcement lacks sweeper_id or started_at")
        rate = doc.get("max_deletes_per_second")
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0
        ):
            raise ValueError(f"announcement has max_deletes_per_second {rate!r}")
        return cls(
            sweeper_id,
            index,
            count,
            float(started),
            _store(doc.get("store")),
            _problems(doc.get("problems", [])),
            None if rate is None else float(rate),
        )

    @property
    def shard(self) -> str:
        """``index/count`` for messages."""
        return f"{self.shard_index}/{self.shard_count}"


def _store(value: object) -> dict[str, str | bool | None] | None:
    """The optional `store` field: a flat object of short strings, booleans and nulls."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > 16:
        raise ValueError("announcement's store is not a small object")
    for name, item in value.items():
        short = isinstance(item, str) and len(item) <= 64
        if len(name) > 64 or not (short or item is None or isinstance(item, bool)):
            raise ValueError(f"announcement's store field {name!r} is not a short value")
    return value


def _problems(value: object) -> tuple[str, ...]:
    """The optional `problems` field: a short list of short strings."""
    if not isinstance(value, list) or len(value) > MAX_PROBLEMS:
        raise ValueError(f"announcement's problems is not a list of at most {MAX_PROBLEMS}")
    if not all(isinstance(item, str) and len(item) <= _MAX_PROBLEM_CHARS for item in value):
        raise ValueError("announcement's problems are not short strings")
    return tuple(value)


def problems_of(lines: Sequence[str]) -> tuple[str, ...]:
    """`lines` as an announcement's problems: each cut short, at most `MAX_PROBLEMS`."""
    cut = [
        line if len(line) <= _MAX_PROBLEM_CHARS else line[: _MAX_PROBLEM_CHARS - 3] + "..."
        for line in lines
    ]
    if len(cut) > MAX_PROBLEMS:
        cut = [*cut[: MAX_PROBLEMS - 1], f"... and {len(cut) - MAX_PROBLEMS + 1} more"]
    return tuple(cut)


def check_shards(me: ShardAnnouncement, announced: Mapping[str, bytes]) -> str | None:
    """Why `me` must not delete given every announcement (its own included); None: agreed."""
    for sweeper_id, raw in sorted(announced.items()):
        if sweeper_id == me.sweeper_id:
            continue
        try:
            other = ShardAnnouncement.decode(raw)
        except ValueError as exc:
            return f"cannot read sweeper {sweeper_id!r}'s shard announcement ({exc})"
        if other.shard_count != me.shard_count:
            return (
                f"shard counts disagree: sweeper {other.sweeper_id!r} runs shard {other.shard}, "
                f"this sweeper ({me.sweeper_id}) runs shard {me.shard}; some prefixes would "
                "never be swept: give every sweeper the same --shard-count"
            )
        if other.shard_index == me.shard_index:
            return (
                f"shard {me.shard} is run twice: by sweeper {other.sweeper_id!r} and by this "
                f"sweeper ({me.sweeper_id}); give each sweeper its own --shard-index"
            )
    return None


def fleet_problem(announced: Mapping[str, bytes]) -> str | None:
    """The first disagreement among all announcements (for `gcd status`); None: agreed."""
    for sweeper_id, raw in sorted(announced.items()):
        try:
            me = ShardAnnouncement.decode(raw)
        except ValueError as exc:
            return f"cannot read sweeper {sweeper_id!r}'s shard announcement ({exc})"
        problem = check_shards(me, announced)
        if problem is not None:
            return problem
    return None


@contextlib.asynccontextmanager
async def announced(
    store: WatermarkStore,
    kv: KV,
    me: ShardAnnouncement,
    *,
    ttl_s: int = DEFAULT_TTL_S,
    now: Callable[[ShardAnnouncement], ShardAnnouncement] = lambda me: me,
) -> AsyncIterator[None]:
    """Keep `me` announced under a lease while the block runs; withdraw it on exit.

    `now(me)` is the announcement as it should read now (`me` with what the sweeper has
    detected and its last round's problems); it is looked at every `ttl_s / 3` s and a
    change is put again under the same lease.

    etcd being unreachable at start or later is logged, never raised: the sweeper's own
    watermark reads then fail and block deletion anyway, and the announcement is put
    back (with a new lease) once etcd answers again.
    """
    session = LeaseSession(kv, ttl_s)
    written = [b""]

    async def ensure() -> None:
        try:
            raw = now(me).encode()
            held = session.lease
            lease = await session.keep()
            if lease != held:
                written[0] = b""
            if raw != written[0]:
                await store.announce_sweeper(me.sweeper_id, raw, lease)
                if not written[0]:
                    log.info("sweep.shard_announced", sweeper_id=me.sweeper_id, shard=me.shard)
                written[0] = raw
        except (L0gcError, OSError) as exc:
            session.forget()
            log.warning("sweep.shard_announce_failed", error=str(exc))

    await ensure()
    async with session.running(ensure, every_s=ttl_s / 3):
        yield


def announcement(
    sweeper_id: str, shard_index: int, shard_count: int, *, rate: float | None = None
) -> ShardAnnouncement:
    """This process's announcement, stamped now (`rate`: its deletes per second)."""
    stamp = round(time.time(), 3)
    return ShardAnnouncement(
        sweeper_id, shard_index, shard_count, stamp, max_deletes_per_second=rate
    )
