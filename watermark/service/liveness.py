"""Which publishers are alive: the liveness key of a non-replicated `watermark serve`.

Design notes: docs/internals/publisher.md, `watermark.service.liveness`.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field

import structlog

from l0gc.contract.kv import KV, Compare, Put
from l0gc.errors import ConfigError, L0gcError, LeaseExpired
from l0gc.etcd.liveness import (
    alive_owners,
    boot_id,
    gone_from_here,
    pid_namespace,
    record_field,
)
from l0gc.etcd.session import LeaseSession

__all__ = ["Liveness", "take_over_plan"]

_log = structlog.get_logger("watermark.liveness")


def take_over_plan(
    owners: Mapping[str, str | None], me: str, live: Callable[[str], bool]
) -> dict[str, str]:
    """The partitions of `owners` (partition -> its record's owner) whose owner is
    another, live publisher: partition -> that owner. Every other one may be taken."""
    return {
        partition: owner
        for partition, owner in sorted(owners.items())
        if owner is not None and owner != me and live(owner)
    }


@dataclass(eq=False)
class Liveness:
    """This process's liveness key, and who else is alive (see the module docstring)."""

    kv: KV
    namespace: str
    owner_id: str
    ttl_s: int
    _: KW_ONLY
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    key: str = field(init=False)
    _session: LeaseSession = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.key = f"{self.namespace}/owners/{self.owner_id}"
        self._session = LeaseSession(self.kv, self.ttl_s, clock=self.clock)

    def _value(self) -> bytes:
        doc = {
            "owner": self.owner_id,
            "host": socket.gethostname(),
            "boot": boot_id(),
            "pidns": pid_namespace(),
            "pid": os.getpid(),
            "started_at": time.time(),
        }
        return json.dumps(doc, sort_keys=True).encode()

    async def alive(self, owners: Sequence[str]) -> set[str]:
        """The ones of `owners` that are running (`l0gc.etcd.liveness.alive_owners`)."""
        return await alive_owners(self.kv, self.namespace, owners)

    async def hold(self, wait_s: float) -> None:
        """Create this process's liveness key on a new lease; if another process holds
        the key of this owner id, wait up to `wait_s` for it to go, then ConfigError."""
        deadline = self.clock() + wait_s
        while True:
            put = Put(self.key, self._value(), await self._renewed_lease())
            if (await self.kv.txn([Compare(self.key, 0)], [put])).succeeded:
                _log.info("watermark.liveness_held", owner=self.owner_id, key=self.key)
                return
            held = await self.kv.get(self.key)
            if held is not None and gone_from_here(held.value):
                # This machine's earlier process of this owner id (crashed, or this
                # container restarted): replace its key rather than wait out its lease.
                replace = [Compare(self.key, held.mod_revision)]
                if (await self.kv.txn(replace, [put])).succeeded:
                    _log.info(
                        "watermark.liveness_held",
                        owner=self.owner_id,
                        key=self.key,
                        replaced_pid=record_field(held.value, "pid"),
                    )
                    return
            if self.clock() >= deadline:
                await self.release()
                raise ConfigError(
                    f"--owner-id {self.owner_id}: another live process uses this owner id "
                    f"(etcd key {self.key} is held on its lease); two publishers with one "
                    "owner id would fence each other out: stop the other one, or give this "
                    "one another --owner-id"
                )
            await self.sleep(min(0.5, self.ttl_s / 4))

    async def wait_for_owners(self, owners: Mapping[str, str | None], wait_s: float) -> None:
        """Return once no partition of `owners` is owned by another live publisher;
        ConfigError naming them if some still are after `wait_s`."""
        deadline = self.clock() + wait_s
        while True:
            if self._renewal_due():  # waiting longer than the TTL: the key must stay
                await self._renew()  # its errors refuse the start, as the reads' do
            alive = await self.alive([o for o in owners.values() if o is not None])
            held = take_over_plan(owners, self.owner_id, alive.__contains__)
            if not held:
                return
            if self.clock() >= deadline:
                shown = ", ".join(f"{p} (owner {o})" for p, o in list(held.items())[:5])
                more = f" and {len(held) - 5} more" if len(held) > 5 else ""
                raise ConfigError(
                    f"{len(held)} of --partitions are owned by a live publisher: {shown}{more}; "
                    "adopting them would make that publisher stale while it serves. Stop it "
                    "first (a restart: its key vanishes when it stops, or one lease TTL after "
                    "it crashed), check --partitions for a typo, or, to take them over from "
                    "a publisher that is alive but must go, pass --take-over"
                )
            await self.sleep(min(0.5, self.ttl_s / 4))

    def _renewal_due(self) -> bool:
        """A quarter of the TTL has passed since the lease was granted or renewed (the
        pace of `keep`), or there is none."""
        return self._session.until - self.clock() <= 0.75 * self.ttl_s

    async def _renewed_lease(self) -> int:
        """The lease to hold the key on: renewed when due, a new one if it lapsed (a
        `hold` can wait longer than the TTL, and etcd refuses a put on a dead lease)."""
        if self._session.lease is not None and not self._renewal_due():
            return self._session.lease
        return await self._session.keep()

    async def keep(self, stop: asyncio.Event) -> None:
        """Refresh the lease every TTL/4 until `stop`; a lost lease is replaced (the key
        created again), etcd failures are logged and retried."""
        await self._session.keep_alive(stop, every_s=self.ttl_s / 4, step=self._keep_once)

    async def _keep_once(self) -> None:
        """One step of `keep`: errors are logged, and the next step tries again."""
        try:
            await self._renew()
        except (L0gcError, ConfigError) as exc:
            _log.warning("watermark.liveness_refresh_failed", error=str(exc))

    async def _renew(self) -> None:
        """Refresh the lease; when etcd says it is gone, create the key again on a new
        one. If that fails, no lease is kept (a kept one would refresh fine with no key
        on it, and the key would never come back), so the next renewal tries again."""
        try:
            if await self._session.refresh():
                return
        except LeaseExpired:
            pass
        _log.warning("watermark.liveness_lost", owner=self.owner_id, key=self.key)
        self._session.forget()
        try:
            await self.hold(0.0)
        except BaseException:
            lease = self._session.forget()
            if lease is not None:
                await self._session.revoke_lease(lease)  # best effort: else it expires
            raise

    async def release(self) -> None:
        """Revoke the lease (the key goes with it): a successor may start at once."""
        await self._session.revoke()
