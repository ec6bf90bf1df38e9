"""Every error code of the HTTP API: its status, what it means, what a writer does next.

Design notes: docs/internals/publisher.md, `watermark.api.openapi_errors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["ACTIONS", "ERROR_CODES", "Action", "ErrorCode"]

Action = Literal["retry", "redirect", "reupload", "refence", "stop"]
ACTIONS: Final[tuple[Action, ...]] = ("retry", "redirect", "reupload", "refence", "stop")


@dataclass(frozen=True, slots=True)
class ErrorCode:
    """One error code of the API."""

    code: str
    status: int
    action: Action
    meaning: str


ERROR_CODES: Final[dict[str, ErrorCode]] = {
    e.code: e
    for e in (
        ErrorCode(
            "bad_request",
            400,
            "stop",
            "the body or path is not what the route "
            "takes (strict JSON, only the route's fields, integers in range)",
        ),
        ErrorCode("unauthorized", 401, "stop", "no bearer token, or one the service does not know"),
        ErrorCode("forbidden", 403, "stop", "the token's role may not use this route"),
        ErrorCode("not_found", 404, "stop", "no such route"),
        ErrorCode(
            "not_hosted",
            404,
            "retry",
            "this publisher does not host the partition "
            "(not adopted, moving between replicas, or let go); retry, at the owner "
            "once one is known",
        ),
        ErrorCode(
            "not_registered", 404, "stop", "the partition has no record in etcd: register it first"
        ),
        ErrorCode(
            "unknown_fence",
            404,
            "refence",
            "no fence with this token, live or "
            "ended in the last 5 minutes (never granted, or forgotten)",
        ),
        ErrorCode("method_not_allowed", 405, "stop", "the route does not take this method"),
        ErrorCode(
            "request_timeout", 408, "retry", "the body did not arrive within the read timeout"
        ),
        ErrorCode(
            "stale_epoch", 409, "reupload", "the epoch is below the partition's fencing window"
        ),
        ErrorCode(
            "epoch_ahead",
            409,
            "reupload",
            "the epoch is above the cluster epoch, which no writer can have read",
        ),
        ErrorCode(
            "illegal_offset",
            409,
            "stop",
            "the offset does not increase past the "
            "partition's last applied offset (or the log end is below it); a commit "
            "refused so releases its fence: resume from last_applied_offset + 1",
        ),
        ErrorCode(
            "already_committed",
            409,
            "stop",
            "this fence was committed at another offset: one fence commits one log entry",
        ),
        ErrorCode(
            "live_owner",
            409,
            "stop",
            "the partition's owner is running (or "
            "published within the last minute): deregistering it would make objects it "
            "still admits deletable; stop or move that publisher first, or deregister "
            "with force (admin: revokes the owner first)",
        ),
        ErrorCode(
            "not_served",
            409,
            "stop",
            "replicas serve only the partitions of their "
            "--partitions list, and this name is not in it: registered, it would be "
            "hosted by nobody and hold back GC; add it to the list first",
        ),
        ErrorCode(
            "fencing_violation",
            409,
            "stop",
            "a commit below the promised window: "
            "the partition is frozen until an operator investigates",
        ),
        ErrorCode(
            "fence_expired",
            410,
            "refence",
            "the fence ended without this commit "
            "(reclaimed at its hold deadline, aborted, revoked, or refused)",
        ),
        ErrorCode("body_too_large", 413, "stop", "the body is larger than the limit"),
        ErrorCode(
            "batch_too_large", 413, "stop", "more batch entries than the limit: split the batch"
        ),
        ErrorCode(
            "references_full",
            429,
            "retry",
            "the commit names more object keys than the partition may hold referenced "
            "(--max-references): nothing changed and the fence is still held; commit again "
            "once the reconciler has released some",
        ),
        ErrorCode(
            "internal_error",
            500,
            "retry",
            "the service failed to handle the "
            "request (its log has the details); report it if it persists",
        ),
        ErrorCode("error", 500, "retry", "an error the service did not classify; report it"),
        ErrorCode(
            "fence_timeout",
            503,
            "retry",
            "the fence was not granted in time: a "
            "window slide waits for a fence still held (the message names it)",
        ),
        ErrorCode(
            "guard_closed",
            503,
            "retry",
            "the partition is closing (shutdown or hand-over): retry, at the new owner",
        ),
        ErrorCode("etcd_unavailable", 503, "retry", "etcd did not answer"),
        ErrorCode(
            "no_owner", 503, "retry", "the partition is moving between replicas (Retry-After: 1)"
        ),
        ErrorCode(
            "too_many_connections", 503, "retry", "the service has its maximum of open connections"
        ),
        ErrorCode(
            "moved",
            307,
            "redirect",
            "another replica owns the partition: the Location header and the address field name it",
        ),
    )
}
