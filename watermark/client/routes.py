"""The writer API's routes, written once for both clients, without I/O.

Design notes: docs/internals/publisher.md, `watermark.client.routes`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from watermark.client.protocol import (
    ApiError,
    EpochInfo,
    Exchange,
    Granted,
    LogReferences,
    PublisherSet,
    Retry,
    batch_fence,
    entry_error,
    objects_body,
    partition_path,
    reconciled_body,
)

__all__ = [
    "ROUTES",
    "CommitEntry",
    "Operation",
    "Request",
    "Target",
    "WriterBase",
    "drive_sync",
]

Json = dict[str, Any]
_T = TypeVar("_T")
CommitEntry = tuple[Granted, int] | tuple[Granted, int, Iterable[str] | None]
"""One commit of a batch: (fence, offset), or (fence, offset, objects) to name the object
keys the entry references (None: none named, no field sent)."""


@dataclass(frozen=True, slots=True)
class Target:
    """What every operation needs from its client: the publisher set and the retries."""

    publishers: PublisherSet
    retry: Retry


@dataclass(frozen=True, slots=True)
class Request:
    """One request to send through its `exchange` (target, retries, redirects)."""

    method: str
    path: str
    body: Json | None
    exchange: Exchange

    @property
    def data(self) -> bytes | None:
        """The body as sent (JSON), or None."""
        return None if self.body is None else json.dumps(self.body).encode()


Operation = Generator[Request, Json, _T]


class WriterBase:
    """What both writer clients hold, for the publishers in `publishers`: `token` is a
    writer (or reconciler, registrar, admin) token; `timeout_s` bounds each request (it
    must exceed the fence timeout); `retry` how often to retry; `fleet` (patterns such as
    ``http://*.l0gc-publisher-peers.l0gc.svc.cluster.local:8080``) admits redirects to the
    replicas it matches (`watermark.client.protocol.PublisherSet`)."""

    def __init__(
        self,
        publishers: Iterable[str],
        *,
        token: str | None = None,
        timeout_s: float = 35.0,
        retry: Retry | None = None,
        fleet: str | None = None,
    ) -> None:
        self.publishers = PublisherSet(publishers, fleet=fleet)
        self.retry = retry if retry is not None else Retry()
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._open(timeout_s, connect_s=min(5.0, timeout_s))

    def _open(self, timeout_s: float, *, connect_s: float) -> None:
        """Set up the client's transport (each client its own)."""

    @property
    def _target(self) -> Target:
        return Target(self.publishers, self.retry)


def _request(
    to: Target,
    method: str,
    path: str,
    body: Json | None,
    *,
    partition: str | None = None,
    base: str | None = None,
    idempotent: bool = True,
) -> Request:
    exchange = Exchange(
        to.publishers, to.retry, partition=partition, base=base, idempotent=idempotent
    )
    return Request(method, path, body, exchange)


def epoch(to: Target) -> Operation[EpochInfo]:
    """``GET /v1/epoch``."""
    return EpochInfo.of((yield _request(to, "GET", "/v1/epoch", None)))


def fence(
    to: Target, partition: str, epoch: int, *, timeout_s: float | None = None
) -> Operation[Granted]:
    """``POST /v1/partitions/{p}/fence``: sent again only when certainly not sent."""
    body: Json = {"epoch": epoch}
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    request = _request(
        to, "POST", partition_path(partition, "/fence"), body, partition=partition, idempotent=False
    )
    answer = yield request
    return Granted.of(answer, request.exchange.target)


def commit(
    to: Target, fence: Granted, offset: int, objects: Iterable[str] | None = None
) -> Operation[Json]:
    """``POST /v1/fences/{token}/commit`` at the publisher that granted it."""
    body: Json = {"offset": offset, **objects_body(objects)}
    return (yield _request(to, "POST", f"/v1/fences/{fence.token}/commit", body, base=fence.base))


def abort(to: Target, fence: Granted) -> Operation[Json]:
    """``POST /v1/fences/{token}/abort`` at the publisher that granted it."""
    return (yield _request(to, "POST", f"/v1/fences/{fence.token}/abort", None, base=fence.base))


def reconciled(
    to: Target,
    partition: str,
    offset: int,
    *,
    log_end_offset: int | None = None,
    objects: Iterable[str] | None = None,
    log_references: LogReferences | None = None,
) -> Operation[Json]:
    """``POST /v1/partitions/{p}/reconciled``."""
    body = reconciled_body(offset, log_end_offset, objects, log_references)
    path = partition_path(partition, "/reconciled")
    return (yield _request(to, "POST", path, body, partition=partition))


def register(to: Target, partition: str) -> Operation[Json]:
    """``POST /v1/partitions/{p}/register``."""
    return (yield _request(to, "POST", partition_path(partition, "/register"), None))


def deregister(
    to: Target, partition: str, *, force: bool = False, reason: str = ""
) -> Operation[Json]:
    """``POST /v1/partitions/{p}/deregister``."""
    body: Json = {"force": force, "reason": reason}
    return (yield _request(to, "POST", partition_path(partition, "/deregister"), body))


def state(to: Target, partition: str) -> Operation[Json]:
    """``GET /v1/partitions/{p}`` at its owner."""
    return (yield _request(to, "GET", partition_path(partition), None, partition=partition))


def fences(
    to: Target, entries: Sequence[tuple[str, int]], *, timeout_s: float | None = None
) -> Operation[list[Granted | ApiError]]:
    """``POST /v1/fences``, one request per owner; a 307 entry goes again to its owner."""
    results: list[Granted | ApiError | None] = [None] * len(entries)
    pending = {index: to.publishers.candidates(p)[0] for index, (p, _) in enumerate(entries)}
    for _ in range(to.retry.attempts):
        if not pending:
            break
        for base in dict.fromkeys(pending.values()):
            indexes = [i for i, b in pending.items() if b == base]
            body: Json = {
                "fences": [{"partition": entries[i][0], "epoch": entries[i][1]} for i in indexes]
            }
            if timeout_s is not None:
                body["timeout_s"] = timeout_s
            answer = yield _request(to, "POST", "/v1/fences", body, base=base, idempotent=False)
            for index, result in zip(indexes, answer["results"], strict=True):
                del pending[index]
                decided = batch_fence(to.publishers, result, base)
                if isinstance(decided, str):
                    pending[index] = decided
                else:
                    results[index] = decided
    for index in pending:
        results[index] = ApiError(307, "moved", "still moving after the retries", {})
    return [r for r in results if r is not None]


def _commit_entry(entry: CommitEntry) -> Json:
    """A `CommitEntry` as the batch sends it: its objects only when named."""
    fence, offset, *named = entry
    return {"token": fence.token, "offset": offset, **objects_body(named[0] if named else None)}


def commits(
    to: Target, entries: Sequence[CommitEntry], objects: Iterable[str] | None = None
) -> Operation[list[Json | ApiError]]:
    """``POST /v1/commits``, one request per publisher that granted the fences; `objects`:
    the batch's, named by every entry that names none of its own."""
    results: list[Json | ApiError | None] = [None] * len(entries)
    sent = [_commit_entry(entry) for entry in entries]  # a bad entry raises before any is sent
    shared = objects_body(objects)  # a lone string raises before anything is sent
    for base in dict.fromkeys(entry[0].base for entry in entries):
        indexes = [i for i, entry in enumerate(entries) if entry[0].base == base]
        body = {"commits": [sent[i] for i in indexes], **shared}
        answer = yield _request(to, "POST", "/v1/commits", body, base=base)
        for index, result in zip(indexes, answer["results"], strict=True):
            results[index] = result if result["status"] == 200 else entry_error(result)
    return [r for r in results if r is not None]


ROUTES: dict[str, Callable[..., Operation[Any]]] = {
    "epoch": epoch,
    "fence": fence,
    "commit": commit,
    "abort": abort,
    "reconciled": reconciled,
    "register": register,
    "deregister": deregister,
    "state": state,
    "fences": fences,
    "commits": commits,
}
"""Every operation, by the name of the client method that runs it."""


def drive_sync(operation: Operation[_T], send: Callable[[Request], Json]) -> _T:
    """Run `operation`, answering each request with `send` (the blocking client)."""
    try:
        request = next(operation)
        while True:
            request = operation.send(send(request))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
