"""`WriterClient`: the publisher's HTTP API for a writer in Python, blocking (urllib3).

Design notes: docs/internals/publisher.md, `watermark.client.sync`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TypeVar

import urllib3
from urllib3.exceptions import ConnectTimeoutError, HTTPError

from watermark.client import routes
from watermark.client.protocol import ApiError, EpochInfo, Granted, LogReferences, json_answer
from watermark.client.routes import CommitEntry, Json

__all__ = ["WriterClient"]

_T = TypeVar("_T")


class WriterClient(routes.WriterBase):
    """A blocking `watermark.client.routes.WriterBase` (see the module docstring)."""

    def _open(self, timeout_s: float, *, connect_s: float) -> None:
        timeout = urllib3.Timeout(connect=connect_s, read=timeout_s)
        self._http = urllib3.PoolManager(retries=False, timeout=timeout)

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.clear()

    def __enter__(self) -> WriterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the routes: each runs its operation of `watermark.client.routes` -------------

    def epoch(self) -> EpochInfo:
        """``GET /v1/epoch``: the cluster epoch now, and the hosted partitions'
        created_epoch (`EpochInfo.stamp` gives the epoch to stamp an object with)."""
        return self._drive(routes.epoch(self._target))

    def fence(self, partition: str, epoch: int, *, timeout_s: float | None = None) -> Granted:
        """Fence `epoch` on `partition` (after the upload, before the log append)."""
        return self._drive(routes.fence(self._target, partition, epoch, timeout_s=timeout_s))

    def commit(self, fence: Granted, offset: int, objects: Iterable[str] | None = None) -> Json:
        """Commit `fence` at the log `offset` of its entry: the partition state, with
        ``repeat`` true when it was already committed at this offset (a retry), and
        ``references``, the keys the partition holds (None until its writer names any).
        `objects`: the object keys the entry references (at most 1,000), held until the
        reconciler releases them; ApiError ``references_full`` (action retry, the fence
        still held) past the publisher's cap. None (the default) sends no field."""
        return self._drive(routes.commit(self._target, fence, offset, objects))

    def abort(self, fence: Granted) -> Json:
        """Release `fence` without committing: ``{"aborted", "outcome"}``."""
        return self._drive(routes.abort(self._target, fence))

    def reconciled(
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
        return self._drive(operation)

    def register(self, partition: str) -> Json:
        """Register `partition` (a registrar or admin token): ``{"registered"`` (false: it
        already was, nothing changed), ``"hosted"`` (the publisher serves it now: fence
        it), ``"record"}``. Safe to repeat."""
        return self._drive(routes.register(self._target, partition))

    def deregister(self, partition: str, *, force: bool = False, reason: str = "") -> Json:
        """Delete `partition`'s record once its data is gone: ``{"deregistered"}`` (false:
        it was not registered). A live owner's partition raises ApiError ``live_owner``
        unless `force` (admin token: the owner is revoked first, which takes seconds)."""
        operation = routes.deregister(self._target, partition, force=force, reason=reason)
        return self._drive(operation)

    def state(self, partition: str) -> Json:
        """What the owner knows of `partition` (``last_applied_offset``: resume after it)."""
        return self._drive(routes.state(self._target, partition))

    def fences(
        self, entries: Sequence[tuple[str, int]], *, timeout_s: float | None = None
    ) -> list[Granted | ApiError]:
        """Fence every (partition, epoch) in one request per owner, in order: each entry
        a `Granted` or the `ApiError` of its refusal (a 307 entry is sent again to its
        owner when that is one of the publishers, else it is `RedirectRefused`)."""
        return self._drive(routes.fences(self._target, entries, timeout_s=timeout_s))

    def commits(
        self, entries: Sequence[CommitEntry], objects: Iterable[str] | None = None
    ) -> list[Json | ApiError]:
        """Commit every (fence, offset), or (fence, offset, objects) to name the keys the
        entry references, one request per publisher that granted them, in order: each
        entry ``{"status": 200, "partition", "offset", "repeat"}`` or the `ApiError` of
        its refusal (``references_full``: that entry only). `objects`: the batch's, named by
        every entry that names none of its own (one object holding data of many partitions:
        its key is sent once)."""
        return self._drive(routes.commits(self._target, entries, objects))

    # -- the exchange ------------------------------------------------------------------

    def _drive(self, operation: routes.Operation[_T]) -> _T:
        return routes.drive_sync(operation, self._run)

    def _run(self, request: routes.Request) -> Json:
        exchange, data = request.exchange, request.data
        while True:
            try:
                response = self._http.request(
                    request.method,
                    exchange.target + request.path,
                    body=data,
                    headers=self._headers,
                    redirect=False,
                    retries=False,
                )
            except HTTPError as exc:
                exchange.failed(str(exc), sent=not isinstance(exc, ConnectTimeoutError))
            else:
                doc = json_answer(response.data)
                if exchange.answered(
                    response.status,
                    doc,
                    retry_after=response.headers.get("Retry-After"),
                    location=response.headers.get("Location"),
                ):
                    return doc
            if exchange.pause_s:
                time.sleep(exchange.pause_s)
