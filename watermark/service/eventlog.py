"""The structlog hook: each core event that is worth a log line, under one fixed name.

Design notes: docs/internals/publisher.md, `watermark.service.eventlog`.
"""

from __future__ import annotations

import structlog

from l0gc.contract.namespace import PublishStatus
from l0gc.events import (
    FenceReclaimed,
    FenceRefusal,
    FenceRefused,
    FencesRevoked,
    FencingViolationFound,
    HandlerTable,
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

_guard_log = structlog.get_logger("watermark.guard")
_ticker_log = structlog.get_logger("watermark.service.ticker")
_publisher_log = structlog.get_logger("watermark.publisher")

_REFUSED_PUBLISH = {
    PublishStatus.MISSING: "watermark.partition_missing",
    PublishStatus.MALFORMED: "watermark.record_malformed",
}


def _fence_refused(event: FenceRefused) -> None:
    if event.reason is FenceRefusal.STALE:
        _guard_log.info(
            "watermark.fence_stale",
            partition=event.partition,
            epoch=event.epoch,
            window=list(event.window),
            floor=event.floor,
        )
    elif event.reason is FenceRefusal.TIMEOUT:
        _guard_log.info(
            "watermark.fence_timeout",
            partition=event.partition,
            epoch=event.epoch,
            timeout_s=event.timeout_s,
            window=list(event.window),
            inflight=event.inflight,
        )


def _window_slid(event: WindowSlid) -> None:
    _guard_log.debug(
        "watermark.window_slid",
        partition=event.partition,
        epoch=event.epoch,
        before=list(event.before),
        after=list(event.after),
    )


def _fence_reclaimed(event: FenceReclaimed) -> None:
    _guard_log.warning(
        "watermark.fence_reclaimed",
        partition=event.partition,
        epoch=event.epoch,
        window=list(event.window),
    )


def _fences_revoked(event: FencesRevoked) -> None:
    _guard_log.warning("watermark.fences_revoked", partition=event.partition, count=event.count)


def _ticker_elected(event: TickerElected) -> None:
    _ticker_log.info("epoch_ticker.elected", owner=event.owner, namespace=event.namespace)


def _leadership_lost(event: TickerLeadershipLost) -> None:
    level = _ticker_log.info if event.reason == "resigned" else _ticker_log.warning
    level("epoch_ticker.leadership_lost", owner=event.owner, reason=event.reason)


def _advance_conflict(event: TickerAdvanceConflict) -> None:
    _ticker_log.info("epoch_ticker.advance_conflict", owner=event.owner, error=event.error)


def _tick_failed(event: TickerTickFailed) -> None:
    _ticker_log.warning("epoch_ticker.tick_failed", owner=event.owner, error=event.error)


def _publish_refused(event: PublishRefused) -> None:
    name = _REFUSED_PUBLISH.get(event.status)
    if name is None:  # logged by the store (see the module docstring)
        return
    _publisher_log.warning(
        name,
        partition=event.partition,
        watermark=event.watermark,
        owner_epoch=event.owner_epoch,
        stored_watermark=event.stored_watermark,
        stored_owner=event.stored_owner,
        stored_owner_epoch=event.stored_owner_epoch,
        detail=event.detail,
    )


def _publish_failed(event: PublishFailed) -> None:
    _publisher_log.warning(
        "watermark.publish_failed", partitions=event.partitions, error=event.error
    )


def _publish_round(event: PublishRound) -> None:
    _publisher_log.info(
        "watermark.publish",
        partitions=event.partitions,
        ok=event.ok,
        duration_s=round(event.duration_s, 4),
    )


def _idle_advanced(event: IdleAdvanced) -> None:
    _publisher_log.info(
        "watermark.idle_advance",
        partition=event.partition,
        epoch=event.epoch,
        watermark=event.watermark,
    )


def _idle_advance_skipped(event: IdleAdvanceSkipped) -> None:
    _publisher_log.info(
        "watermark.idle_advance_skipped", partition=event.partition, error=event.error
    )


def _fencing_violation(event: FencingViolationFound) -> None:
    _publisher_log.error(
        "watermark.fencing_violation",
        partition=event.partition,
        offset=event.offset,
        epoch=event.epoch,
        window=list(event.window),
        published_watermark=event.published_watermark,
        error=event.error,
    )


class EventLog(HandlerTable):
    """Logs the events in the module docstring's table; ignores every other event."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(
            {
                FenceRefused: _fence_refused,
                WindowSlid: _window_slid,
                FenceReclaimed: _fence_reclaimed,
                FencesRevoked: _fences_revoked,
                TickerElected: _ticker_elected,
                TickerLeadershipLost: _leadership_lost,
                TickerAdvanceConflict: _advance_conflict,
                TickerTickFailed: _tick_failed,
                PublishRefused: _publish_refused,
                PublishFailed: _publish_failed,
                PublishRound: _publish_round,
                IdleAdvanced: _idle_advanced,
                IdleAdvanceSkipped: _idle_advance_skipped,
                FencingViolationFound: _fencing_violation,
            }
        )


EVENT_LOG = EventLog()
"""The one logging hook (stateless; shared)."""
