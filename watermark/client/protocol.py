"""What a writer client decides, without I/O: where a request goes, whether a redirect
may be followed, whether an answer is retried, and the answers as values.

Design notes: docs/internals/publisher.md, `watermark.client.protocol`.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from l0gc.errors import ConfigError
from watermark.api.openapi_errors import ERROR_CODES, Action
from watermark.core.fleet import FleetUrls

__all__ = [
    "ApiError",
    "EpochInfo",
    "Exchange",
    "Granted",
    "LogReferences",
    "PublisherSet",
    "RedirectRefused",
    "Retry",
    "Unreachable",
    "action_of",
    "batch_fence",
    "entry_error",
    "json_answer",
    "log_references_field",
    "objects_body",
    "partition_path",
    "reconciled_body",
]


class ApiError(Exception):
    """The API refused a request for good (or ran out of retries): `status`, `code`, the
    server's `message`, what to do next (`action`) and the whole answer (`body`)."""

    def __init__(self, status: int, code: str, message: str, body: Mapping[str, Any]) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message
        self.action: Action = action_of(status, code)
        self.body = dict(body)

    def __str__(self) -> str:
        return f"{self.status} {self.code} ({self.action}): {self.message}"


class RedirectRefused(ApiError):
    """A 307 pointed outside the configured publisher set: not followed, no token sent."""

    def __init__(self, location: str, allowed: Sequence[str]) -> None:
        super().__init__(
            307,
            "moved",
            f"redirect to {location!r} refused: it is not one of the configured publishers "
            f"({', '.join(allowed)}); the bearer token was not sent there. Add that replica "
            "to the client's publishers (or its fleet patterns) if it is yours, else report "
            "the redirect",
            {"location": location},
        )
        self.action = "stop"
        self.location = location


class Unreachable(ApiError):
    """No publisher answered (refused, reset, timed out) within the retries."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(
            0,
            "unreachable",
            f"no answer from {target}: {reason}; check that the "
            "publisher runs and the URL is right",
            {},
        )
        self.action = "retry"


def action_of(status: int, code: str) -> Action:
    """What a writer does after this answer (see `watermark.api.openapi_errors`): the
    code's action, else by status (5xx: retry, 307: redirect, other 4xx: stop)."""
    known = ERROR_CODES.get(code)
    if known is not None:
        return known.action
    if status == 307:
        return "redirect"
    return "retry" if status >= 500 else "stop"


def objects_body(objects: Iterable[str] | None) -> dict[str, list[str]]:
    """The ``objects`` field of a commit or a reconciled report: the keys in order, or
    nothing at all for None (a writer that names no references sends no field; an empty
    list is sent: on a report it says "lifted none of the keys"). A lone string is a
    ValueError: it would be sent as its characters."""
    if objects is None:
        return {}
    if isinstance(objects, str | bytes):
        raise ValueError(
            f"objects must be a list of object keys, got the string {objects[:60]!r}: "
            "wrap a single key in a list"
        )
    return {"objects": list(objects)}


LogReferences = Mapping[int, Iterable[str]]
"""Per log offset, the object keys that entry names (a log end's ``log_references``)."""


def reconciled_body(
    offset: int,
    log_end_offset: int | None,
    objects: Iterable[str] | None = None,
    log_references: LogReferences | None = None,
) -> dict[str, Any]:
    """The body of a reconciled report (the log end, the keys its entries name and the
    lifted keys only when given)."""
    body: dict[str, Any] = {"offset": offset}
    if log_end_offset is not None:
        body["log_end_offset"] = log_end_offset
    if log_references is not None:
        body["log_references"] = log_references_field(log_references)
    return {**body, **objects_body(objects)}


def log_references_field(log_references: LogReferences) -> dict[str, list[Any]]:
    """``{"offsets", "keys"}`` as the publisher takes it: each key with its entry's offset,
    offsets rising."""
    offsets: list[int] = []
    keys: list[str] = []
    for offset in sorted(log_references):
        named = log_references[offset]
        if isinstance(named, str | bytes):
            raise ValueError(
                f"log_references[{offset}] must be a list of object keys, got the string "
                f"{named[:60]!r}: wrap a single key in a list"
            )
        for key in named:
            offsets.append(offset)
            keys.append(key)
    return {"offsets": offsets, "keys": keys}


def partition_path(partition: str, suffix: str = "") -> str:
    """``/v1/partitions/{partition}{suffix}`` with the name percent-encoded ('/' too)."""
    return f"/v1/partitions/{urllib.parse.quote(partition, safe='')}{suffix}"


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"publisher URL {url!r} must be http(s)://HOST[:PORT]")
    port = parts.port or (443 if scheme == "https" else 80)
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


class PublisherSet:
    """The publishers a client trusts with its token, and each partition's known owner.

    `publishers` are tried in order; `fleet` (optional, comma-separated
    ``SCHEME://HOST[:PORT]`` patterns, `watermark.core.fleet`) admits redirects to any
    replica whose address matches, e.g. the stable names of a StatefulSet's pods."""

    def __init__(self, publishers: Iterable[str], *, fleet: str | None = None) -> None:
        bases = [url.rstrip("/") for url in publishers]
        if not bases:
            raise ValueError("give at least one publisher URL, e.g. http://127.0.0.1:8080")
        self.bases: tuple[str, ...] = tuple(bases)
        self._by_origin = {_origin(base): base for base in bases}
        self._owners: dict[str, str] = {}
        self.fleet: FleetUrls | None = None
        if fleet is not None:
            try:
                self.fleet = FleetUrls.parse(fleet, what="the client's fleet")
            except ConfigError as exc:
                raise ValueError(str(exc)) from None

    def allowed(self) -> tuple[str, ...]:
        """Where a redirect may go, for messages: the publishers and the fleet patterns."""
        return self.bases if self.fleet is None else (*self.bases, f"fleet {self.fleet.spec}")

    def candidates(self, partition: str | None) -> list[str]:
        """The publishers to try for a request, best first: the known owner of
        `partition`, then the set in its order."""
        owner = None if partition is None else self._owners.get(partition)
        rest = [base for base in self.bases if base != owner]
        return rest if owner is None else [owner, *rest]

    def follow(self, location: str) -> str:
        """The configured base URL a redirect's `location` lies on (or, inside the fleet,
        its origin); RedirectRefused if it is outside both (never send a token there)."""
        try:
            origin = _origin(location)
        except ValueError:
            origin = ""
        base = self._by_origin.get(origin)
        if base is not None:
            return base
        if origin and self.fleet is not None and self.fleet.allows(origin):
            return origin  # a replica of the fleet: its origin is its base URL
        raise RedirectRefused(location, self.allowed())

    def owned_by(self, partition: str, base: str) -> None:
        """`partition` answered at `base`: send its requests there from now on."""
        self._owners[partition] = base

    def forget(self, partition: str) -> None:
        """The owner of `partition` is not known any more."""
        self._owners.pop(partition, None)


@dataclass(frozen=True, slots=True)
class Retry:
    """How often and how patiently a client retries (see the module docstring)."""

    attempts: int = 6
    """Tries in all, the first included."""
    first_pause_s: float = 0.1
    max_pause_s: float = 2.0

    def pause(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before try `attempt` + 1 (Retry-After wins when given)."""
        if retry_after is not None:
            try:
                return float(min(max(0.0, float(retry_after)), self.max_pause_s * 5))
            except ValueError:
                pass
        return float(min(self.first_pause_s * 2.0**attempt, self.max_pause_s))


@dataclass(frozen=True, slots=True)
class Granted:
    """A granted fence: commit it (or abort it) at `base`, the publisher that granted it."""

    token: str
    partition: str
    epoch: int
    window: tuple[int | None, int | None]
    deadline: float | None
    """Unix seconds of the hold deadline (None: none)."""
    expires_in_s: float | None
    slid: bool
    base: str = field(repr=False)

    @classmethod
    def of(cls, answer: Mapping[str, Any], base: str) -> Granted:
        """From a fence answer (or a batch entry with status 200) received from `base`."""
        low, high = answer["window"]
        return cls(
            token=answer["token"],
            partition=answer["partition"],
            epoch=answer["epoch"],
            window=(low, high),
            deadline=answer["deadline"],
            expires_in_s=answer["expires_in_s"],
            slid=answer["slid"],
            base=base,
        )


@dataclass(frozen=True, slots=True)
class EpochInfo:
    """``GET /v1/epoch``: the cluster epoch and each hosted partition's created_epoch."""

    epoch: int
    created_epochs: Mapping[str, int]

    def stamp(self, partitions: Iterable[str]) -> int:
        """The epoch to stamp an object of `partitions` with: max(epoch, each
        partition's created_epoch) (partitions not listed count as the epoch)."""
        return max((self.epoch, *(self.created_epochs.get(p, self.epoch) for p in partitions)))

    @classmethod
    def of(cls, answer: Mapping[str, Any]) -> EpochInfo:
        return cls(
            epoch=answer["epoch"],
            created_epochs={p["partition"]: p["created_epoch"] for p in answer["partitions"]},
        )


_MOVING = frozenset({"not_hosted", "guard_closed", "no_owner"})


class Exchange:
    """One request through its retries and redirects, decided without I/O: the client
    sends to `target`, then reports the answer (`answered`) or the failure (`failed`);
    each says whether it is done, or sets `target` and `pause_s` for the next try."""

    def __init__(
        self,
        publishers: PublisherSet,
        retry: Retry,
        *,
        partition: str | None = None,
        base: str | None = None,
        idempotent: bool = True,
    ) -> None:
        self._publishers = publishers
        self._retry = retry
        self._partition = partition
        self._idempotent = idempotent
        self._pinned = base is not None
        self._candidates = [base] if base is not None else publishers.candidates(partition)
        self._next = 0
        self.target: str = self._candidates[0]
        self.pause_s = 0.0
        self.attempt = 0

    def answered(
        self, status: int, doc: Mapping[str, Any], *, retry_after: str | None, location: str | None
    ) -> bool:
        """True when `doc` is the answer (2xx); False to try again at `target` after
        `pause_s`; raises ApiError (or RedirectRefused) when the writer must act."""
        if status < 300:
            if self._partition is not None and not self._pinned:
                self._publishers.owned_by(self._partition, self.target)
            return True
        code = str(doc.get("error", "")) if isinstance(doc, Mapping) else ""
        message = str(doc.get("message", "")) if isinstance(doc, Mapping) else ""
        error = ApiError(status, code, message or f"HTTP {status}", doc)
        self.attempt += 1
        if status == 307 and not self._pinned:
            self.target = self._publishers.follow(location or "")
            if self._partition is not None:
                self._publishers.owned_by(self._partition, self.target)
            self.pause_s = 0.0
            if self.attempt >= self._retry.attempts:
                raise error
            return False
        if error.action != "retry" or self.attempt >= self._retry.attempts:
            raise error
        if self._partition is not None and code in _MOVING and not self._pinned:
            self._publishers.forget(self._partition)
            self._advance()
        self.pause_s = self._retry.pause(self.attempt - 1, retry_after)
        return False

    def failed(self, reason: str, *, sent: bool) -> None:
        """No answer (`sent`: the request may have arrived): set the next try, or raise
        Unreachable when it is not safe or the retries are spent."""
        self.attempt += 1
        if (sent and not self._idempotent) or self.attempt >= self._retry.attempts:
            raise Unreachable(self.target, reason)
        if self._partition is not None and not self._pinned:
            self._publishers.forget(self._partition)
        self._advance()
        self.pause_s = self._retry.pause(self.attempt - 1, None)

    def _advance(self) -> None:
        if len(self._candidates) > 1:
            self._next = (self._next + 1) % len(self._candidates)
            self.target = self._candidates[self._next]


def json_answer(data: bytes) -> dict[str, Any]:
    """An answer body as a JSON object (anything else becomes an error document)."""
    try:
        doc = json.loads(data) if data else {}
    except ValueError:
        return {"error": "", "message": data[:200].decode(errors="replace")}
    return doc if isinstance(doc, dict) else {"error": "", "message": str(doc)[:200]}


def entry_error(result: Mapping[str, Any]) -> ApiError:
    """The ApiError of a refused batch entry."""
    return ApiError(result["status"], result.get("error", ""), result.get("message", ""), result)


def batch_fence(
    publishers: PublisherSet, result: Mapping[str, Any], base: str
) -> Granted | ApiError | str:
    """A fence batch entry: granted, refused, or (a str) the publisher to send it to next."""
    if result["status"] == 200:
        return Granted.of(result, base)
    if result["status"] == 307:
        try:
            owner = publishers.follow(str(result.get("address", "")))
        except ApiError as refused:
            return refused
        publishers.owned_by(result["partition"], owner)
        return owner
    return entry_error(result)
