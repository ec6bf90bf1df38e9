"""Prometheus metrics of the watermark publisher service, on a registry of their own.

Design notes: docs/internals/publisher.md, `watermark.service.metrics`.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from l0gc.contract.namespace import PublishStatus
from l0gc.events import HandlerTable
from l0gc.process.buildinfo import register_build_info
from watermark.events import (
    ClusterEpochRead,
    FenceGranted,
    FenceReclaimed,
    FenceRefusal,
    FenceRefused,
    FenceReleased,
    FencesRevoked,
    FencingViolationFound,
    HostedChanged,
    IdleAdvanced,
    Published,
    PublishFailed,
    PublishRefused,
    PublishRound,
    TickerAdvanced,
    TickerElected,
    TickerLeadershipLost,
    TickerStarted,
    WindowSlid,
)

__all__ = [
    "FenceResult",
    "HttpRefusal",
    "MetricsHook",
    "PublishResult",
    "WatermarkMetrics",
]


class FenceResult(enum.Enum):
    """How a fence request ended (the ``result`` label of fences_total)."""

    INSIDE = "inside"
    """Admitted under the shared lock, the window unchanged."""
    SLIDE = "slide"
    """Admitted after sliding the window up to the epoch."""
    STALE = "stale"
    """Refused: the epoch is below the window (or at/below the published M(p))."""
    TIMEOUT = "timeout"
    """The fence deadline passed while waiting for the lock."""


class PublishResult(enum.Enum):
    """How one partition's publish ended (the ``outcome`` label of publishes_total; the
    store's per-partition answer is `l0gc.contract.namespace.PublishOutcome`)."""

    OK = "ok"
    REFUSED_LOWER = "refused_lower"
    STALE_OWNER = "stale_owner"
    MISSING = "missing"
    ERROR = "error"


class HttpRefusal(enum.Enum):
    """Why the HTTP API refused a request or a connection (the ``reason`` label)."""

    UNAUTHORIZED = "unauthorized"
    """401: no bearer token, or one the service does not know."""
    FORBIDDEN = "forbidden"
    """403: the token's role may not use the route."""
    TOO_MANY_CONNECTIONS = "too_many_connections"
    """A connection closed at accept time (--max-connections were open), or a request other
    than a probe on a connection of the probes' reserve."""
    TOO_MANY_FROM_PEER = "too_many_from_peer"
    """A connection closed at accept time: its address had --max-connections-per-peer open."""
    HEAD_TIMEOUT = "head_timeout"
    """A new connection closed because its request head did not arrive within
    --http-head-timeout."""
    READ_TIMEOUT = "read_timeout"
    """408: the body did not arrive within --http-read-timeout."""
    BODY_TOO_LARGE = "body_too_large"
    """413: the body was larger than the limit."""
    BAD_REQUEST = "bad_request"
    """400: the body is not strict JSON or not what the route takes."""


def _makers(
    reg: CollectorRegistry,
) -> tuple[Callable[..., Counter], Callable[..., Gauge], Callable[..., Histogram]]:
    """Counter, Gauge and Histogram, each registering on `reg`."""
    return (
        functools.partial(Counter, registry=reg),
        functools.partial(Gauge, registry=reg),
        functools.partial(Histogram, registry=reg),
    )


class WatermarkMetrics:
    """The publisher service's metrics on a dedicated registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        register_build_info(reg, "publisher")
        counter, gauge, histogram = _makers(reg)
        self.fences = counter(
            "l0gc_watermark_fences_total",
            "Fence requests by result (inside, slide, stale, timeout).",
            ["result"],
        )
        self.fences_reclaimed = counter(
            "l0gc_watermark_fences_reclaimed_total",
            "Held fences reclaimed after their deadline because a window slide waited on them.",
        )
        self.window_slides = counter(
            "l0gc_watermark_window_slides_total",
            "Fencing window slides (a higher epoch took the exclusive lock).",
        )
        self.held_fences = 0
        """Fences held right now by the guards sharing these metrics; they add and
        subtract here, and `inflight_fences` reads it at collection time (a plain int:
        a `Gauge.inc` and `dec` per fence cost ~0.65 us on the fence fast path)."""
        self.inflight_fences = gauge(
            "l0gc_watermark_inflight_fences",
            "Fences currently held (writes admitted and not yet committed or aborted).",
        )
        self.inflight_fences.set_function(self._held_fences)
        self.publishes = counter(
            "l0gc_watermark_publishes_total",
            "Partition record publishes by outcome.",
            ["outcome"],
        )
        self.publish_duration = histogram(
            "l0gc_watermark_publish_duration_seconds",
            "Duration of one publish round (all dirty partitions, batched).",
        )
        self.partitions_owned = gauge(
            "l0gc_watermark_partitions_owned",
            "Partitions this process owns and publishes.",
        )
        self.min_watermark = gauge(
            "l0gc_watermark_min_watermark",
            "Lowest M(p) among the partitions this process owns (-1 when it owns none).",
        )
        self.log_end_unknown = gauge(
            "l0gc_watermark_log_end_unknown_partitions",
            "Owned partitions behind the cluster epoch that wait for their reconciler's log "
            "end (an owner restarted or adopted them without it; gcd status says which).",
        )
        self.log_end_unknown_for = gauge(
            "l0gc_watermark_log_end_unknown_seconds",
            "How long the oldest of them has waited for its log end (0: none waits).",
        )
        self.cluster_epoch = gauge(
            "l0gc_watermark_cluster_epoch",
            "Cluster epoch as last read or written by this process.",
        )
        self.epoch_advances = counter(
            "l0gc_watermark_epoch_advances_total",
            "Cluster epoch advances made by this process (ticker or admin).",
        )
        self.idle_advances = counter(
            "l0gc_watermark_idle_advances_total",
            "Epoch advances applied to idle, fully reconciled partitions.",
        )
        self.fencing_violations = counter(
            "l0gc_watermark_fencing_violations_total",
            "Commits refused because their epoch was below the promised window; each "
            "freezes its partition's M(p) until it is adopted again.",
        )
        self.ticker_leader = gauge(
            "l0gc_watermark_ticker_leader",
            "1 while this process is the elected epoch ticker leader, else 0.",
        )
        self.ticker_interval = gauge(
            "l0gc_watermark_ticker_interval_seconds",
            "Interval of the epoch ticker running in this process (it advances the epoch "
            "this often while it leads); 0 when this process runs no ticker.",
        )
        self.ticker_last_advance = gauge(
            "l0gc_watermark_ticker_last_advance_timestamp_seconds",
            "Unix time of this process's last epoch advance as ticker leader; 0 when it has "
            "made none.",
        )
        self.http_refusals = counter(
            "l0gc_watermark_http_refusals_total",
            "Requests and connections the HTTP API refused, by reason (unauthorized, "
            "forbidden, too_many_connections, too_many_from_peer, head_timeout, read_timeout, "
            "body_too_large, bad_request).",
            ["reason"],
        )
        for refusal in HttpRefusal:
            self.http_refusals.labels(reason=refusal.value)
        self._replica_metrics(reg)
        # Every labelled child is bound once here: `labels(...)` costs ~1.5 us a call
        # (kwargs, a lock, a dict lookup), which the fence fast path cannot afford.
        self._fence_children = {r: self.fences.labels(result=r.value) for r in FenceResult}
        self._publish_children = {o: self.publishes.labels(outcome=o.value) for o in PublishResult}
        self.min_watermark.set(-1)
        self.hook = MetricsHook(self)
        """The hook that feeds these metrics from the core's events (see the docstring)."""

    def _replica_metrics(self, reg: CollectorRegistry) -> None:
        """The metrics of `watermark serve --replicated` (flat at 0 without it)."""
        counter, gauge, histogram = _makers(reg)
        self.replica_member = gauge(
            "l0gc_watermark_replica_member",
            "1 while this replica holds its membership lease (it may own partitions), else 0.",
        )
        self.replicas = gauge(
            "l0gc_watermark_replicas",
            "Live replicas (member records) in this replica's last view of the replica set.",
        )
        self.adoptions = counter(
            "l0gc_watermark_adoptions_total",
            "Partitions this replica adopted, by whether the log end was known (the previous "
            "owner sealed it: a handover) or unknown (a failover: no idle advance until the "
            "first commit).",
            ["log_end"],
        )
        self.handovers = counter(
            "l0gc_watermark_handovers_total",
            "Partitions this replica handed over to another, by whether the final publish "
            "was sealed (the next owner knows where the log ends) or not.",
            ["outcome"],
        )
        self.time_to_adopt = histogram(
            "l0gc_watermark_time_to_adopt_seconds",
            "From when this replica first saw a partition without an owner (or handed over "
            "by a leaving replica) to when it had adopted it.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
        )
        self.partitions_unowned = gauge(
            "l0gc_watermark_partitions_unowned",
            "Partitions of this replica's --partitions that no replica owns in its last view.",
        )
        self.longest_unowned = gauge(
            "l0gc_watermark_longest_unowned_seconds",
            "How long the partition of this replica's --partitions that has been without an "
            "owner longest has been so, as this replica has seen it (0 when all are owned).",
        )
        self.ownership_lapses = counter(
            "l0gc_watermark_ownership_lapses_total",
            "Times this replica's membership lease lapsed (not renewed in time) and it "
            "dropped every partition it owned.",
        )
        self.redirects = counter(
            "l0gc_watermark_redirects_total",
            "Requests answered 307 with the owning replica's address.",
        )
        self.members_ignored = counter(
            "l0gc_watermark_members_ignored_total",
            "Member records under {ns}/replicas/members/ ignored (no redirect to them, no "
            "partition assigned to them) because their address is outside --fleet-urls.",
        )
        for known in ("known", "unknown"):
            self.adoptions.labels(log_end=known)
        for outcome in ("sealed", "unsealed"):
            self.handovers.labels(outcome=outcome)

    def _held_fences(self) -> float:
        return self.held_fences

    def fence(self, result: FenceResult) -> None:
        """Count one fence request that ended with `result`."""
        self._fence_children[result].inc()

    def fence_counter(self, result: FenceResult) -> Counter:
        """The fences_total child of `result`, to bind once and `inc()` on a hot path."""
        return self._fence_children[result]

    def publish(self, outcome: PublishResult, count: int = 1) -> None:
        """Count `count` partition publishes that ended with `outcome`."""
        self._publish_children[outcome].inc(count)

    def http_refused(self, reason: HttpRefusal) -> None:
        """Count one request or connection the HTTP API refused for `reason`."""
        self.http_refusals.labels(reason=reason.value).inc()

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)


_PUBLISH_RESULTS = {
    PublishStatus.OK: PublishResult.OK,
    PublishStatus.REFUSED_LOWER: PublishResult.REFUSED_LOWER,
    PublishStatus.STALE_OWNER: PublishResult.STALE_OWNER,
    PublishStatus.MISSING: PublishResult.MISSING,
    PublishStatus.MALFORMED: PublishResult.ERROR,
}
_FENCE_REFUSALS = {FenceRefusal.STALE: FenceResult.STALE, FenceRefusal.TIMEOUT: FenceResult.TIMEOUT}


class MetricsHook(HandlerTable):
    """Feeds a `WatermarkMetrics` from the core's events (a `RoutedHook`).

    Each handler is bound once; the fence fast path's (`FenceGranted`, `FenceReleased`)
    do one add and at most one bound `inc`, as the guard did before it emitted events.
    """

    __slots__ = ("_inside", "_metrics", "_slide")

    def __init__(self, metrics: WatermarkMetrics) -> None:
        self._metrics = metrics
        self._inside = metrics.fence_counter(FenceResult.INSIDE).inc
        self._slide = metrics.fence_counter(FenceResult.SLIDE).inc
        super().__init__(
            {
                FenceGranted: self._granted,
                FenceReleased: self._released,
                FenceRefused: self._refused,
                WindowSlid: self._window_slid,
                FenceReclaimed: self._reclaimed,
                FencesRevoked: self._revoked,
                TickerStarted: self._ticker_started,
                TickerAdvanced: self._ticker_advanced,
                TickerElected: self._ticker_elected,
                TickerLeadershipLost: self._ticker_lost,
                Published: self._published,
                PublishRefused: self._publish_refused,
                PublishFailed: self._publish_failed,
                PublishRound: self._publish_round,
                ClusterEpochRead: self._cluster_epoch,
                IdleAdvanced: self._idle_advanced,
                FencingViolationFound: self._fencing_violation,
                HostedChanged: self._hosted_changed,
            }
        )

    def _granted(self, event: FenceGranted) -> None:
        self._metrics.held_fences += 1
        (self._slide if event.slid else self._inside)()

    def _released(self, event: FenceReleased) -> None:
        self._metrics.held_fences -= 1

    def _refused(self, event: FenceRefused) -> None:
        result = _FENCE_REFUSALS.get(event.reason)
        if result is not None:  # a closed guard is not a fence result
            self._metrics.fence(result)

    def _window_slid(self, event: WindowSlid) -> None:
        self._metrics.window_slides.inc()

    def _reclaimed(self, event: FenceReclaimed) -> None:
        self._metrics.fences_reclaimed.inc()
        self._metrics.held_fences -= 1

    def _revoked(self, event: FencesRevoked) -> None:
        self._metrics.held_fences -= event.count

    def _ticker_started(self, event: TickerStarted) -> None:
        self._metrics.ticker_interval.set(event.interval_s)

    def _ticker_advanced(self, event: TickerAdvanced) -> None:
        self._metrics.epoch_advances.inc()
        self._metrics.ticker_last_advance.set_to_current_time()
        self._metrics.cluster_epoch.set(event.epoch)

    def _ticker_elected(self, event: TickerElected) -> None:
        self._metrics.ticker_leader.set(1)

    def _ticker_lost(self, event: TickerLeadershipLost) -> None:
        self._metrics.ticker_leader.set(0)

    def _published(self, event: Published) -> None:
        self._metrics.publish(PublishResult.OK)

    def _publish_refused(self, event: PublishRefused) -> None:
        self._metrics.publish(_PUBLISH_RESULTS[event.status])

    def _publish_failed(self, event: PublishFailed) -> None:
        self._metrics.publish(PublishResult.ERROR, event.partitions)

    def _publish_round(self, event: PublishRound) -> None:
        self._metrics.publish_duration.observe(event.duration_s)

    def _cluster_epoch(self, event: ClusterEpochRead) -> None:
        self._metrics.cluster_epoch.set(event.epoch)

    def _idle_advanced(self, event: IdleAdvanced) -> None:
        self._metrics.idle_advances.inc()

    def _fencing_violation(self, event: FencingViolationFound) -> None:
        self._metrics.fencing_violations.inc()

    def _hosted_changed(self, event: HostedChanged) -> None:
        self._metrics.partitions_owned.set(event.partitions)
        low = event.min_watermark
        self._metrics.min_watermark.set(-1 if low is None else low)
        self._metrics.log_end_unknown.set(event.log_end_unknown)
        self._metrics.log_end_unknown_for.set(event.log_end_unknown_for_s)
