"""Finding the `watermark serve` replica that owns a partition, as docs/integration.md's loop does.

A request about a partition goes to the replica last seen owning it, at first to the
partition's route (with replicated publishers only a hint). Then, as the integration
guide tells a writer to:

* **307** names the owner (`Location`): remember it and send the request there;
* **503** ``no_owner``: the partition is moving between replicas; ask again shortly;
* a refused connection: that replica is gone; forget it and try the next replica (a
  kept-alive connection the replica dropped is retried once on a new one first: the
  requests routed here are fences, state reads and reconciled reports, which a replica
  may see twice).

Publishers that are not replicated own what they are routed, so none of this happens
for them. Requests about a fence token (commit, abort) are not routed here: a token
lives on the replica that granted it and is never redirected.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

__all__ = ["Owners", "call_json"]

_MOVING_RETRY_S = 0.2
_MAX_HOPS = 8


async def call_json(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: dict[str, Any] | None,
    *,
    headers: dict[str, str],
    timeout_s: float,
) -> tuple[int, dict[str, Any], str | None]:
    """One request, redirects not followed: (status, JSON object or {}, Location)."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with session.request(
        method, url, json=body, headers=headers, timeout=timeout, allow_redirects=False
    ) as response:
        try:
            doc = await response.json(content_type=None)
        except ValueError:
            doc = {}
        location = response.headers.get("Location")
        return response.status, doc if isinstance(doc, dict) else {}, location


class Owners:
    """Where each partition's owner was last seen; see the module docstring."""

    def __init__(
        self, route: Callable[[str], str], headers: dict[str, str], replicas: Sequence[str] = ()
    ) -> None:
        self._route = route
        self._headers = headers
        self._replicas = list(replicas)
        self._seen: dict[str, tuple[str, str]] = {}
        """partition -> (its route then, the replica seen owning it)."""

    def base(self, partition: str) -> str:
        """The base URL of the replica last seen owning `partition`, while its route is
        the one it had then; else its route (a controller that moves a partition changes
        its route, and a writer must follow that, not what it saw before)."""
        route = self._route(partition)
        seen = self._seen.get(partition)
        return seen[1] if seen is not None and seen[0] == route else route

    def _remember(self, partition: str, base: str) -> None:
        self._seen[partition] = (self._route(partition), base)

    async def request(
        self,
        session: aiohttp.ClientSession,
        method: str,
        partition: str,
        suffix: str,
        body: dict[str, Any] | None,
        *,
        timeout_s: float,
        patience_s: float,
    ) -> tuple[int, dict[str, Any], str]:
        """`method` on /v1/partitions/{partition}{suffix} at its owner: (status, answer,
        base URL that answered). Follows 307s, waits out 503 ``no_owner`` for up to
        `patience_s`, and raises `aiohttp.ClientConnectorError` once no replica answers."""
        deadline = time.monotonic() + patience_s
        path = f"/v1/partitions/{urllib.parse.quote(partition, safe='')}{suffix}"
        base, gone, hops, redialled = self.base(partition), set[str](), 0, False
        while True:
            try:
                status, doc, location = await call_json(
                    session, method, base + path, body, headers=self._headers, timeout_s=timeout_s
                )
            except aiohttp.ClientConnectorError:
                self._seen.pop(partition, None)
                gone.add(base)
                others = [r for r in self._replicas if r not in gone]
                if not others or time.monotonic() > deadline:
                    raise
                base = others[0]
                continue
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                if redialled:
                    raise
                redialled = True  # the pooled connection was dropped: dial again
                continue
            if status == 307 and location and hops < _MAX_HOPS:
                hops += 1
                parts = urllib.parse.urlsplit(location)
                base = f"{parts.scheme}://{parts.netloc}"
                self._remember(partition, base)
                continue
            if status == 503 and doc.get("error") == "no_owner" and time.monotonic() < deadline:
                await asyncio.sleep(_MOVING_RETRY_S)
                continue
            if status == 200:
                self._remember(partition, base)
            return status, doc, base
