"""Prometheus metrics of `gcd scrub --every` (`l0gc_scrub_*`), on a registry of their own.

Gauges hold the last run's findings; the request counter sums over the process's life.
docs/scrub.md lists them with the alerts they are for.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from gcd.scrub.findings import Cause
from gcd.scrub.report import ScrubReport
from l0gc.process.buildinfo import register_build_info

__all__ = ["ScrubMetrics"]


class ScrubMetrics:
    """Every scrub metric, registered on `self.registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        register_build_info(reg, "scrub")

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, labels, namespace="l0gc_scrub", registry=reg)

        self.missing = gauge(
            "missing_keys",
            "Referenced keys the store says are gone (NotFound), at the last run, by what "
            "the deletion journal says: deleted_by_l0gc (page), absent_from_journal, "
            "journal_not_read.",
            ("cause",),
        )
        self.unknown = gauge(
            "unknown_keys",
            "Referenced keys whose HEAD had no usable answer twice at the last run (5xx, "
            "throttle, timeout): re-checked next run, never counted missing.",
        )
        self.referenced = gauge("referenced_keys", "Referenced keys HEADed at the last run.")
        self.stranded = gauge(
            "stranded_keys",
            "Keys at or below the M of --stranded-after ago still listed at the last run.",
        )
        self.stranded_bytes = gauge("stranded_bytes", "Bytes of the stranded keys.")
        self.unparsable = gauge(
            "unparsable_keys", "Keys under the root the key layout does not parse."
        )
        self.silent = gauge(
            "silent_partitions",
            "Partitions pinning M whose record has not moved for --silent-after.",
        )
        self.last_run = gauge(
            "last_run_timestamp_seconds", "When the last completed run started (unix time)."
        )
        self.last_duration = gauge("last_run_duration_seconds", "How long the last run took.")
        self.failed_runs = Counter(
            "runs_failed",
            "Runs that ended on an error (etcd or the store unreachable).",
            namespace="l0gc_scrub",
            registry=reg,
        )
        self.requests = Counter(
            "requests",
            "Requests sent to the object store, by kind (head, list).",
            ("kind",),
            namespace="l0gc_scrub",
            registry=reg,
        )
        for cause in Cause:
            self.missing.labels(cause=cause.value).set(0)
        for kind in ("head", "list"):
            self.requests.labels(kind=kind)

    def observe(self, report: ScrubReport) -> None:
        """Set the gauges from one completed run; add its requests to the counter."""
        for cause in Cause:
            count = sum(1 for m in report.missing if m.cause is cause)
            self.missing.labels(cause=cause.value).set(count)
        self.unknown.set(len(report.unknown))
        self.referenced.set(report.referenced)
        self.stranded.set(report.stranded)
        self.stranded_bytes.set(0 if report.listing is None else report.listing.stranded_bytes)
        self.unparsable.set(report.unparsable)
        self.silent.set(len(report.silent))
        self.last_run.set(report.at)
        self.last_duration.set(report.duration_s)
        self.requests.labels(kind="head").inc(report.head_requests)
        self.requests.labels(kind="list").inc(report.list_requests)
