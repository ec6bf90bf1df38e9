"""Whose owner is running: the read side of the liveness keys (docs/etcd-contract.md).

A non-replicated `watermark serve` holds ``{ns}/owners/{owner_id}`` on a lease (written by
`watermark.service.liveness`); a replica is alive while its member record
``{ns}/replicas/members/{id}`` exists. `live_owner` is the rule both sides apply before
an action that would make a running owner's objects deletable.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from l0gc.contract.kv import KV
from l0gc.contract.record import PartitionRecord

__all__ = [
    "RECENT_PUBLISH_S",
    "alive_owners",
    "boot_id",
    "gone_from_here",
    "live_owner",
    "pid_namespace",
    "record_field",
]

RECENT_PUBLISH_S = 60.0
"""A record published this recently counts as having a live owner."""


def boot_id() -> str:
    """This machine's boot id (shared by the containers of one node), or ""."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def record_field(raw: bytes, name: str) -> object:
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc.get(name) if isinstance(doc, dict) else None


def pid_namespace() -> str:
    """This process's PID namespace (``pid:[4026531836]``), or ""."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def gone_from_here(raw: bytes) -> bool:
    """True if a liveness record names this machine and PID namespace (host name, boot
    id, namespace) and a pid that is not running: its writer is certainly gone (a crash
    followed by a restart on the same machine). Anything else is judged by its lease."""
    here = (socket.gethostname(), boot_id(), pid_namespace())
    there = (record_field(raw, "host"), record_field(raw, "boot"), record_field(raw, "pidns"))
    pid = record_field(raw, "pid")
    if not all(here) or there != here or type(pid) is not int or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


async def alive_owners(kv: KV, namespace: str, owners: Sequence[str]) -> set[str]:
    """The ones of `owners` that hold a liveness key or a replica member record (a key
    left by a process of this machine that is gone does not count)."""
    found: set[str] = set()
    for owner in sorted(set(owners)):
        item = await kv.get(f"{namespace}/owners/{owner}")
        keyed = item is not None and not gone_from_here(item.value)
        if keyed or await kv.get(f"{namespace}/replicas/members/{owner}") is not None:
            found.add(owner)
    return found


async def live_owner(
    kv: KV, namespace: str, record: PartitionRecord, *, now: float | None = None
) -> str | None:
    """Why `record`'s owner counts as live (see the module docstring), None if not."""
    owner = record.owner
    if owner is None:
        return None
    if await alive_owners(kv, namespace, [owner]):
        return f"owner {owner!r} is running (it holds a liveness key or a member record)"
    now = time.time() if now is None else now
    if record.updated_at is not None and now - record.updated_at < RECENT_PUBLISH_S:
        return f"owner {owner!r} published {now - record.updated_at:.0f} s ago"
    return None
