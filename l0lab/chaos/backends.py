"""How a chaos writer fences and commits: over the publisher's HTTP API, or embedded.

Both follow the writer protocol of docs/integration.md: fence the object's epoch, append
the entry to the partition log, commit the fence with the entry's offset. What a
backend must get right is the *outcome* of a commit, because the partition log keeps
an entry only if the publisher has it, or will be told about it:

* ``ok``: the publisher applied the entry.
* ``abort``: it provably did not (a refusal, or the request never reached a process):
  the writer takes the entry out of its log again (`PartitionLog.abort`).
* ``kept``: the answer was lost and the publisher died meanwhile: nobody can tell, so
  the entry stays in the log, and the publisher's successor is told the log end when
  it adopts the partition (which then holds M(p) until the reconciler passes it).

`HttpBackend` resolves a lost answer by asking again with the same fence token until a
definite answer comes: 200 (applied now), or 404/410 (the token is gone), after which
the partition's state says whether the offset was applied. `EmbeddedBackend` calls the
in-process `Publisher`, whose answers are never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import structlog

from l0gc.errors import (
    EpochAhead,
    EtcdUnavailable,
    FenceTimeout,
    FencingViolation,
    GuardClosed,
    IllegalTransition,
    PartitionNotHosted,
    StaleEpoch,
    WriteRefused,
)
from l0lab.chaos.owners import Owners, call_json
from watermark.service.guard import FenceToken
from watermark.service.publisher import Publisher

__all__ = ["Commit", "EmbeddedBackend", "HttpBackend"]

_log = structlog.get_logger("gcd.chaos.writer")
Commit = tuple[str, str]
"""(outcome, why): outcome is "ok", "kept" or "abort"."""
_RETRY_S = 0.2


class HttpBackend:
    """Fence and commit through `watermark serve`'s HTTP API with a writer token; with
    replicated publishers, fences and state reads find the owner (`l0lab.chaos.owners`)
    and a commit goes to the replica that granted its fence."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        route: Callable[[str], str],
        token: str,
        *,
        replicas: Sequence[str] = (),
        fence_timeout_s: float = 4.0,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self._session = session
        self._headers = {"Authorization": f"Bearer {token}"}
        self._owners = Owners(route, self._headers, replicas)
        self._granted: dict[str, str] = {}
        """fence token -> base URL of the replica that granted it."""
        self._fence_timeout_s = fence_timeout_s
        self._stopping = stopping

    async def _call(
        self, method: str, url: str, body: dict[str, Any] | None, timeout_s: float
    ) -> tuple[int, dict[str, Any]]:
        status, doc, _ = await call_json(
            self._session, method, url, body, headers=self._headers, timeout_s=timeout_s
        )
        return status, doc

    async def fence(self, partition: str, epoch: int) -> tuple[str | None, str]:
        """(token, "") when granted, else (None, why)."""
        body = {"epoch": epoch, "timeout_s": self._fence_timeout_s}
        wait = self._fence_timeout_s + 2.0
        try:
            status, doc, base = await self._owners.request(
                self._session, "POST", partition, "/fence", body, timeout_s=wait, patience_s=wait
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            return None, f"unreachable ({type(exc).__name__})"
        if status == 200 and isinstance(doc.get("token"), str):
            self._granted[doc["token"]] = base
            return doc["token"], ""
        return None, str(doc.get("error", status))

    def _token_url(self, token: str, partition: str, action: str) -> str:
        base = self._granted.get(token) or self._owners.base(partition)
        return f"{base}/v1/fences/{token}/{action}"

    async def abort(self, token: str, partition: str) -> None:
        """Release a fence that will not be committed (best effort)."""
        url = self._token_url(token, partition, "abort")
        self._granted.pop(token, None)
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            await self._call("POST", url, {}, 2.0)

    async def commit(
        self, partition: str, token: str, offset: int, *, resumed: bool = False
    ) -> Commit:
        """Commit `token` at `offset` and find out, whatever happens, whether it was applied.

        `resumed`: a predecessor may already have sent this commit (a restarted writer
        resolving its log), so a forgotten token proves nothing by itself.
        """
        try:
            return await self._commit(partition, token, offset, sent=resumed)
        finally:
            self._granted.pop(token, None)

    async def _commit(self, partition: str, token: str, offset: int, *, sent: bool) -> Commit:
        url = self._token_url(token, partition, "commit")
        while True:
            try:
                status, doc = await self._call("POST", url, {"offset": offset}, 3.0)
            except aiohttp.ClientConnectorError:
                if not sent:
                    return "abort", "publisher unreachable: the commit was never received"
                return "kept", "publisher gone with the commit's outcome unknown"
            except (aiohttp.ClientError, TimeoutError):
                sent = True  # it may have been received and applied
                await asyncio.sleep(_RETRY_S)
                continue
            if status == 200:
                return "ok", ""
            code = str(doc.get("error", status))
            if status in (404, 410):
                if not sent:
                    return "abort", code  # the fence was gone before this commit
                applied = await self._applied(partition, offset)
                if applied is None:
                    return "kept", "publisher gone with the commit's outcome unknown"
                return ("ok", "") if applied else ("abort", code)
            if status >= 500 and code not in {"guard_closed", "etcd_unavailable"}:
                sent = True
                await asyncio.sleep(_RETRY_S)
                continue
            return "abort", code  # refused: illegal_offset, fencing_violation, guard_closed

    async def _applied(self, partition: str, offset: int) -> bool | None:
        """Whether the publisher has applied `offset`; None when nobody can tell."""
        while True:
            try:
                status, doc, _ = await self._owners.request(
                    self._session, "GET", partition, "", None, timeout_s=3.0, patience_s=10.0
                )
            except aiohttp.ClientConnectorError:
                return None
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(_RETRY_S)
                continue
            if status != 200:
                return None  # not hosted there any more: keep the entry
            last = doc.get("last_applied_offset")
            return type(last) is int and last >= offset


class EmbeddedBackend:
    """Fence and commit on a `Publisher` in this process (the Python API)."""

    _REFUSED = (
        StaleEpoch,
        EpochAhead,
        FenceTimeout,
        GuardClosed,
        PartitionNotHosted,
        EtcdUnavailable,
    )

    def __init__(self, publisher: Publisher, *, fence_timeout_s: float = 4.0) -> None:
        self.publisher = publisher
        self._fence_timeout_s = fence_timeout_s
        self._tokens: dict[str, FenceToken] = {}

    async def fence(self, partition: str, epoch: int) -> tuple[str | None, str]:
        """(token, "") when granted, else (None, why)."""
        try:
            token = await self.publisher.acquire(partition, epoch, self._fence_timeout_s)
        except self._REFUSED as exc:
            return None, type(exc).__name__
        self._tokens[token.token] = token
        return token.token, ""

    async def abort(self, token: str, partition: str) -> None:
        """Release a fence that will not be committed."""
        held = self._tokens.pop(token, None)
        if held is not None:
            self.publisher.abort(held)

    async def commit(self, partition: str, token: str, offset: int) -> Commit:
        """Commit in process: the answer is never lost."""
        held = self._tokens.pop(token, None)
        if held is None:
            return "abort", "unknown fence"
        try:
            self.publisher.commit(held, offset)
        except FencingViolation:
            return "abort", "fencing_violation"
        except (WriteRefused, IllegalTransition) as exc:
            self.publisher.abort(held)
            return "abort", type(exc).__name__
        return "ok", ""
