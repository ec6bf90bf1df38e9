"""`AsyncWriterClient`: the publisher's HTTP API for a writer in Python, on asyncio
(aiohttp, as the service itself). The same routes, rules and answers as the blocking
`watermark.client.sync.WriterClient`, from the same operations
(`watermark.client.routes`); every method is a coroutine, and this module only does the
I/O.

Design notes: docs/internals/publisher.md, `watermark.client.aio`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TypeVar

import aiohttp
from yarl import URL

from watermark.client import routes
from watermark.client.protocol import ApiError, EpochInfo, Granted, LogReferences, json_answer
from watermark.client.routes import CommitEntry, Json

__all__ = ["AsyncWriterClient"]

_T = TypeVar("_T")


class AsyncWriterClient(routes.WriterBase):
    """An asyncio `watermark.client.routes.WriterBase`: every route is a coroutine."""

    def _open(self, timeout_s: float, *, connect_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=connect_s)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        """Close the pooled connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> AsyncWriterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the routes: each runs its operation of `watermark.client.routes` -------------

    async def epoch(self) -> EpochInfo:
        """``GET /v1/epoch``: the cluster epoch now, and the hosted partitions'
        created_epoch (`EpochInfo.stamp` gives the epoch to stamp an object with)."""
        return await self._drive(routes.epoch(self._target))

    async def fence(self, partition: str, epoch: int, *, timeout_s: float | None = None) -> Granted:
        """Fence `epoch` on `partition` (after the upload, before the log append)."""
        return await self._drive(routes.fence(self._target, partition, epoch, timeout_s=timeout_s))

    async def commit(
        self, fence: Granted, offset: int, objects: Iterable[str] | None = None
    ) -> Json:
        """Commit `fence` at the log `offset` of its entry: the partition state, with
        ``repeat`` true when it was already committed at this offset (a retry), and
        ``references``, the keys the partition holds (None until its writer names any).
        `objects`: the object keys the entry references (at most 1,000), held until the
        reconciler releases them; ApiError ``references_full`` (action retry, the fence
        still held) past the publisher's cap. None (the default) sends no field."""
        return await self._drive(routes.commit(self._target, fence, offset, objects))

    async def abort(self, fence: Granted) -> Json:
        """Release `fence` without committing: ``{"aborted", "outcome"}``."""
        return await self._drive(routes.abort(self._target, fence))

    async def reconciled(
        self,
        partition: str,
        offset: int,
        *,
        log_end_offset: int | None = None,
        objects: Iterable[str] | None = None,
        log_references: LogReferences | None = None,
    ) -> Json:
        """The reconciler lifted every entry of `partition` through `offset`. When the answer
        says ``log_end_wanted``, read your log's last offset after it and pass it as
        `log_end_offset` with the next report (docs/integration.md), and, when the writer
        names references, `log_references`: the keys of each log entry from the answer's
        ``references_from`` through that end ({offset: [key, ...]}). `objects`: the keys
        this report lifted, when the writer names references: only those are released
        (a key of a passed entry not named stays referenced); None (the default) sends no
        field and releases every key of the entries through `offset`."""
        operation = routes.reconciled(
            self._target,
            partition,
            offset,
            log_end_offset=log_end_offset,
            objects=objects,
            log_references=log_references,
        )
        return await self._drive(operation)

    async def register(self, partition: str) -> Json:
        """Register `partition` (a registrar or admin token): ``{"registered"`` (false: it
        already was, nothing changed), ``"hosted"`` (the publisher serves it now: fence
        it), ``"record"}``. Safe to repeat."""
        return await self._drive(routes.register(self._target, partition))

    async def deregister(self, partition: str, *, force: bool = False, reason: str = "") -> Json:
        """Delete `partition`'s record once its data is gone: ``{"deregistered"}`` (false:
        it was not registered). A live owner's partition raises ApiError ``live_owner``
        unless `force` (admin token: the owner is revoked first, which takes seconds)."""
        operation = routes.deregister(self._target, partition, force=force, reason=reason)
        return await self._drive(operation)

    async def state(self, partition: str) -> Json:
        """What the owner knows of `partition` (``last_applied_offset``: resume after it)."""
        return await self._drive(routes.state(self._target, partition))

    async def fences(
        self, entries: Sequence[tuple[str, int]], *, timeout_s: float | None = None
    ) -> list[Granted | ApiError]:
        """Fence every (partition, epoch) in one request per owner, in order: each entry
        a `Granted` or the `ApiError` of its refusal (a 307 entry is sent again to its
        owner when that is one of the publishers, else it is `RedirectRefused`)."""
        return await self._drive(routes.fences(self._target, entries, timeout_s=timeout_s))

    async def commits(
        self, entries: Sequence[CommitEntry], objects: Iterable[str] | None = None
    ) -> list[Json | ApiError]:
        """Commit every (fence, offset), or (fence, offset, objects) to name the keys the
        entry references, one request per publisher that granted them, in order: each
        entry ``{"status": 200, "partition", "offset", "repeat"}`` or the `ApiError` of
        its refusal (``references_full``: that entry only). `objects`: the batch's, named by
        every entry that names none of its own (one object holding data of many partitions:
        its key is sent once)."""
        return await self._drive(routes.commits(self._target, entries, objects))

    # -- the exchange ------------------------------------------------------------------

    async def _drive(self, operation: routes.Operation[_T]) -> _T:
        try:
            request = next(operation)
            while True:
                request = operation.send(await self._run(request))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _run(self, request: routes.Request) -> Json:
        exchange, data = request.exchange, request.data
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        while True:
            try:
                async with self._session.request(
                    request.method,
                    URL(exchange.target + request.path, encoded=True),
                    data=data,
                    headers=self._headers,
                    allow_redirects=False,
                ) as response:
                    doc = json_answer(await response.read())
                    done = exchange.answered(
                        response.status,
                        doc,
                        retry_after=response.headers.get("Retry-After"),
                        location=response.headers.get("Location"),
                    )
                if done:
                    return doc
            except (aiohttp.ClientError, TimeoutError) as exc:
                refused = isinstance(exc, aiohttp.ClientConnectorError)
                exchange.failed(str(exc) or type(exc).__name__, sent=not refused)
            if exchange.pause_s:
                await asyncio.sleep(exchange.pause_s)
