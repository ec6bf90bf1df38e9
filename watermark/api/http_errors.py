"""How the API answers a failure: one JSON error document, one status per error code.

Every failure is ``{"error": CODE, "message": TEXT, ...}`` (`error`); `problem` maps an
exception to its code through `ERRORS` (most specific first), takes the status from
`watermark.api.openapi_errors.ERROR_CODES` (the one table of the API's errors, which
the OpenAPI document and docs/integration.md show) and adds the fields a client acts on
(the window and floor of ``stale_epoch``, the cluster epoch of ``epoch_ahead``, ...).
`UnknownFence` (404) and `Moved` (307 to another replica) are the two answers that are
not errors of the publisher itself. The middleware that applies this to every route is
in `watermark.api.http_api`; the batch routes answer each refused entry with the same
status, code and fields (`watermark.api.http_fences`).
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from l0gc.errors import (
    AlreadyCommitted,
    ConfigError,
    EpochAhead,
    EtcdUnavailable,
    FenceExpired,
    FenceTimeout,
    FencingViolation,
    GuardClosed,
    IllegalTransition,
    L0gcError,
    LiveOwner,
    NoOwner,
    NotServed,
    PartitionNotHosted,
    PartitionNotRegistered,
    ReferencesFull,
    StaleEpoch,
)
from watermark.api.openapi_errors import ERROR_CODES

__all__ = ["ERRORS", "UNKNOWN_FENCE", "Moved", "UnknownFence", "error", "problem", "short"]

short = reprlib.Repr()  # a hostile value must not flood a message
short.maxstring = short.maxother = short.maxlong = 40

# Most specific first: PartitionNotRegistered is a ConfigError. Each code's status is
# in `watermark.api.openapi_errors.ERROR_CODES`, the one table of the API's errors.
ERRORS: tuple[tuple[type[L0gcError], str], ...] = (
    (StaleEpoch, "stale_epoch"),
    (EpochAhead, "epoch_ahead"),
    (PartitionNotHosted, "not_hosted"),
    (PartitionNotRegistered, "not_registered"),
    (FenceTimeout, "fence_timeout"),
    (GuardClosed, "guard_closed"),
    (FenceExpired, "fence_expired"),
    (AlreadyCommitted, "already_committed"),
    (FencingViolation, "fencing_violation"),
    (ReferencesFull, "references_full"),
    (IllegalTransition, "illegal_offset"),
    (EtcdUnavailable, "etcd_unavailable"),
    (NoOwner, "no_owner"),
    (LiveOwner, "live_owner"),
    (NotServed, "not_served"),
    (ConfigError, "bad_request"),
    (L0gcError, "error"),
)

UNKNOWN_FENCE = (
    "no such fence: never granted by this publisher, or it ended more than 5 minutes ago "
    "and is forgotten; do not commit the entry under this token: fence again"
)


class UnknownFence(Exception):
    """No live fence has this token; answered with 404."""


@dataclass(eq=False, repr=False)
class Moved(Exception):
    """Another replica owns the partition; answered with 307 to it."""

    partition: str
    owner: str
    address: str


def error(status: int, code: str, message: str, **extra: Any) -> web.Response:
    """The JSON error document."""
    return web.json_response({"error": code, "message": message, **extra}, status=status)


def problem(exc: L0gcError) -> tuple[int, str, dict[str, Any]]:
    """(status, code, extra fields) of the answer to `exc` (see `ERRORS`)."""
    code = next(c for kind, c in ERRORS if isinstance(exc, kind))
    status = ERROR_CODES[code].status
    extra: dict[str, Any] = {}
    if isinstance(exc, StaleEpoch | FenceTimeout):
        extra["window"] = list(exc.window)
    if isinstance(exc, FenceTimeout) and exc.oldest is not None:
        extra["held_epoch"], extra["held_for_s"] = exc.oldest[0], round(exc.oldest[1], 3)
    if isinstance(exc, AlreadyCommitted):
        extra["committed_offset"] = exc.committed
    if isinstance(exc, StaleEpoch):
        extra["floor"] = exc.floor
    if isinstance(exc, EpochAhead):
        extra["cluster_epoch"] = exc.cluster_epoch
    return status, code, extra
