"""The structlog hook: each core event that is worth a log line, under one fixed name.

Design notes: docs/internals/publisher.md, `watermark.service.eventlog`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from l0gc.contract.namespace import PublishStatus
from l0gc.events import HandlerTable
from watermark.events import (
    FenceReclaimed,
    FenceRefusal,
    FenceRefused,
    FencesRevoked,
    FencingViolationFound,
    IdleAdvanced,
    IdleAdvanceSkipped,
    PublishFailed,
    PublishRefused,
    PublishRound,
    TickerAdvanceConflict,
    TickerElected,
    TickerLeadershipLost,
    TickerTickFailed,
    WindowSlid,
)

__all__ = ["EVENT_LOG", "EventLog"]

_guard = structlog.get_logger("watermark.guard")
_ticker = structlog.get_logger("watermark.service.ticker")
_publisher = structlog.get_logger("watermark.publisher")

_BOUNDS = frozenset({"window", "before", "after"})
"""The fields logged as lists (an epoch window's bounds)."""


@dataclass(frozen=True, slots=True)
class _Line:
    """A handler: log `name` at `level` on `log`, with the event's `fields` (names
    separated by spaces, in their order)."""

    log: Any
    level: str
    name: str
    fields: str

    def __call__(self, event: Any) -> None:
        getattr(self.log, self.level)(self.name, **_fields(event, self.fields))


def _fields(event: Any, names: str) -> dict[str, Any]:
    """The log fields `names` of `event`, in that order (bounds as lists)."""
    values = {name: getattr(event, name) for name in names.split()}
    return {name: list(v) if name in _BOUNDS else v for name, v in values.items()}


_LINES: dict[type, _Line] = {
    WindowSlid: _Line(_guard, "debug", "watermark.window_slid", "partition epoch before after"),
    FenceReclaimed: _Line(_guard, "warning", "watermark.fence_reclaimed", "partition epoch window"),
    FencesRevoked: _Line(_guard, "warning", "watermark.fences_revoked", "partition count"),
    TickerElected: _Line(_ticker, "info", "epoch_ticker.elected", "owner namespace"),
    TickerAdvanceConflict: _Line(_ticker, "info", "epoch_ticker.advance_conflict", "owner error"),
    TickerTickFailed: _Line(_ticker, "warning", "epoch_ticker.tick_failed", "owner error"),
    PublishFailed: _Line(_publisher, "warning", "watermark.publish_failed", "partitions error"),
    IdleAdvanced: _Line(_publisher, "info", "watermark.idle_advance", "partition epoch watermark"),
    IdleAdvanceSkipped: _Line(
        _publisher, "info", "watermark.idle_advance_skipped", "partition error"
    ),
    FencingViolationFound: _Line(
        _publisher,
        "error",
        "watermark.fencing_violation",
        "partition offset epoch window published_watermark error",
    ),
}
"""The events logged as they are: one line each, its fields the event's."""

_REFUSED_FENCE = {
    FenceRefusal.STALE: _Line(
        _guard, "info", "watermark.fence_stale", "partition epoch window floor"
    ),
    FenceRefusal.TIMEOUT: _Line(
        _guard, "info", "watermark.fence_timeout", "partition epoch timeout_s window inflight"
    ),
}

_REFUSED_PUBLISH = {
    status: _Line(
        _publisher,
        "warning",
        name,
        "partition watermark owner_epoch stored_watermark stored_owner stored_owner_epoch detail",
    )
    for status, name in (
        (PublishStatus.MISSING, "watermark.partition_missing"),
        (PublishStatus.MALFORMED, "watermark.record_malformed"),
    )
}


def _fence_refused(event: FenceRefused) -> None:
    line = _REFUSED_FENCE.get(event.reason)
    if line is not None:
        line(event)


def _leadership_lost(event: TickerLeadershipLost) -> None:
    level = _ticker.info if event.reason == "resigned" else _ticker.warning
    level("epoch_ticker.leadership_lost", owner=event.owner, reason=event.reason)


def _publish_refused(event: PublishRefused) -> None:
    line = _REFUSED_PUBLISH.get(event.status)
    if line is not None:  # else logged by the store (see the module docstring)
        line(event)


def _publish_round(event: PublishRound) -> None:
    _publisher.info(
        "watermark.publish",
        partitions=event.partitions,
        ok=event.ok,
        duration_s=round(event.duration_s, 4),
    )


class EventLog(HandlerTable):
    """Logs the events in the module docstring's table; ignores every other event."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(
            {
                **_LINES,
                FenceRefused: _fence_refused,
                TickerLeadershipLost: _leadership_lost,
                PublishRefused: _publish_refused,
                PublishRound: _publish_round,
            }
        )


EVENT_LOG = EventLog()
"""The one logging hook (stateless; shared)."""
