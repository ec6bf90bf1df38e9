"""The sweep runtime: one object that opens what a sweeping command needs, owns it, and
runs one round (`gcd sweep`) or rounds forever (`gcd daemon`).

Design notes: docs/internals/sweep.md, `gcd.service.runtime`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from gcd.journal.records import (
    DEFAULT_MAX_AGE_S,
    DEFAULT_MAX_BYTES,
    JournalWriter,
    check_audit_prefix,
    read_journal,
    read_journal_objects,
)
from gcd.observe.hooks import hook_of
from gcd.observe.report import PlanWriter, RoundResult
from gcd.observe.telemetry import DEFAULT_HOOK
from gcd.rules.admission import SafetyGate
from gcd.rules.prices import PriceTable, prices_for
from gcd.rules.undo import lifecycle_conflicts
from gcd.service.reader import etcd_client
from gcd.storage.backend import StoreSettings
from gcd.storage.objectstore import BucketStore, DetectingStore
from gcd.storage.registry import open_store, preflight_store
from gcd.sweep.binding import BoundSource
from gcd.sweep.brake import brake_for
from gcd.sweep.shards import (
    DEFAULT_TTL_S,
    ShardAnnouncement,
    announced,
    announcement,
    new_sweeper_id,
    problems_of,
)
from gcd.sweep.sweeper import RoundConfig, Sweeper, run_round
from gcd.sweep.usage import UsageRecorder, usage_key
from gcd.undo.window import UndoKeeper
from l0gc.contract.binding import StorageTarget
from l0gc.errors import ConfigError
from l0gc.etcd.follow import GcFollower
from l0gc.etcd.settings import EtcdSettings
from l0gc.events import Hooks

if TYPE_CHECKING:  # the daemon and its HTTP server (aiohttp.web): imported when used
    from gcd.journal.search import SegmentSource
    from gcd.observe.metrics import SweeperMetrics
    from gcd.service.daemon import Daemon, DaemonConfig
    from l0gc.auth import TokenFile
    from l0gc.etcd.client import EtcdKV

__all__ = [
    "LEDGER_MARGIN_S",
    "MAX_SEGMENT_READ",
    "Announcing",
    "JournalSettings",
    "SweepRuntime",
    "SweepSettings",
    "check_lifecycle",
    "undo_fields",
]

log = structlog.get_logger("gcd.service.runtime")

MAX_SEGMENT_READ = 1 << 30
"""The largest journal segment read back (undo window, restore)."""
LEDGER_MARGIN_S = 86_400.0
"""Shipped segments older than now - window - this are not read at start: a marker
they name is normally reclaimed long before. A round that finds an unknown marker
older than that on an eligible key reads them all once (`UndoKeeper.older_marker`)."""


@dataclass(frozen=True, slots=True)
class JournalSettings:
    """The deletion journal of a sweeping command (`--journal-*`; no journal without a
    `directory`)."""

    directory: str | None = None
    """Where segments are written; for reading, several directories, comma-separated."""
    prefix: str | None = None
    """Where closed segments are shipped in the store (outside the root)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    max_age_s: float = DEFAULT_MAX_AGE_S
    keep_local: bool = False
    retention_s: float | None = None

    def segments(self, objects: BucketStore, root: str) -> SegmentSource | None:
        """Where segments are read from (None: no journal given), for `gcd explain`."""
        from gcd.journal.search import (  # noqa: PLC0415 - a round reads no segment
            BothSegments,
            LocalSegments,
            PrefixSegments,
        )

        local = shipped = None
        if self.directory is not None:
            local = LocalSegments([Path(p) for p in self.directory.split(",") if p])
        if self.prefix is not None:
            shipped = PrefixSegments(objects, check_audit_prefix(self.prefix, root))
        if local is not None and shipped is not None:
            return BothSegments(local, shipped)
        return local or shipped


@dataclass(frozen=True, slots=True)
class SweepSettings:
    """Validated settings of a sweeping command: what `SweepRuntime.open` opens."""

    round: RoundConfig
    store: StoreSettings
    etcd: EtcdSettings | None
    safe_epoch_override: int | None = None
    shard_ttl_s: int = DEFAULT_TTL_S
    journal: JournalSettings = field(default_factory=JournalSettings)
    prices: PriceTable | None = None
    """The price table of the usage record and the cost line (None: the store's own)."""

    @property
    def target(self) -> StorageTarget:
        """The storage this command sweeps, as a namespace binding (and the journal) name it."""
        return self.store.target(self.round.layout.root)

    @property
    def shard(self) -> tuple[int, int] | None:
        """(index, count) to announce; None for a dry run, which deletes nothing."""
        if self.round.dry_run:
            return None
        return self.round.shard_index, self.round.shard_count

    @property
    def price_table(self) -> PriceTable:
        """`prices`, or the default table of the store's kind."""
        return self.prices if self.prices is not None else prices_for(self.store.kind)


def undo_fields(undo: dict[str, Any]) -> dict[str, str | bool | None]:
    """The last round's undo report as flat, short fields of the shard announcement's
    `store` (`gcd status` shows them)."""
    oldest = undo.get("oldest_pending")
    pending = f"{undo.get('pending_keys', 0)} keys, {undo.get('pending_bytes', 0)} bytes"
    return {
        "undo_window": f"{float(undo.get('window_s') or 0):g}s",
        "undo_rule": None if undo.get("rule") is None else str(undo["rule"]),
        "undo_pending": pending,
        "undo_oldest_pending": None if oldest is None else str(oldest),
    }


class Announcing:
    """What a running sweeper says of itself in its shard announcement, read each time
    it is refreshed: what its store detected, and what its last round could not collect
    (prefixes that cannot be listed, nested roots of other namespaces), for `gcd status`."""

    def __init__(self, objects: object, sweeper: Sweeper) -> None:
        self.objects = objects
        self.sweeper = sweeper

    def __call__(self, me: ShardAnnouncement) -> ShardAnnouncement:
        objects = self.objects
        store = objects.detected.to_dict() if isinstance(objects, DetectingStore) else None
        last = self.sweeper.last_summary
        lines: list[str] = []
        if last is not None:
            if last.blocked_reason is not None:
                lines.append(f"blocked, deletes nothing: {last.blocked_reason}")
            lines += [f"cannot list {prefix}: skipped" for prefix in last.unlistable_prefixes]
            lines += [
                f"nested root {root}: another namespace's claim, kept" for root in last.nested_roots
            ]
        if store is not None and last is not None and last.undo is not None:
            store.update(undo_fields(last.undo))
        return dataclasses.replace(me, store=store, problems=problems_of(lines))


@contextlib.asynccontextmanager
async def _journal(
    settings: SweepSettings,
    sweeper_id: str,
    kv: EtcdKV | None,
    objects: BucketStore,
    *,
    metrics: SweeperMetrics | None,
    hook: Hooks,
) -> AsyncIterator[tuple[JournalWriter, ...]]:
    """The journal sinks (none without a directory); while they run the journal's end is
    anchored in etcd (with etcd, on the runtime's client) and closed segments are shipped
    (with a prefix); on exit the last segment is closed, anchored and shipped."""
    journal = settings.journal
    if journal.directory is None:
        if journal.prefix is not None:
            raise ConfigError(
                "--journal-prefix needs --journal-dir (the local spool of the segments it uploads)"
            )
        yield ()
        return
    target = settings.target
    prefix = None if journal.prefix is None else check_audit_prefix(journal.prefix, target.root)
    namespace = None if settings.etcd is None else settings.etcd.namespace
    writer = JournalWriter(
        Path(journal.directory),
        sweeper_id,
        namespace=namespace,
        bucket=target.bucket,
        root=target.root,
        endpoint_url=target.endpoint_url,
        kind=target.kind,
        metrics=metrics,
        hook=hook,
        max_bytes=journal.max_bytes,
        max_age_s=journal.max_age_s,
    )
    if prefix is None and journal.retention_s is not None:
        raise ConfigError(
            "--journal-retention needs --journal-prefix (it prunes the segments shipped there)"
        )
    from gcd.journal.anchor import AnchorKeeper  # noqa: PLC0415 - only with a journal

    keeper = AnchorKeeper(
        writer,
        kv=kv,
        namespace=namespace,
        objects=objects,
        prefix=prefix,
        keep_local=journal.keep_local,
        retention_s=journal.retention_s,
    )
    keeper.start()
    try:
        yield (writer,)
    finally:
        writer.close()
        await keeper.close()


async def check_lifecycle(objects: BucketStore, root: str, window: float) -> None:
    """Refuse a window the bucket's lifecycle rules cannot keep (a versioned S3 bucket
    whose rules expire noncurrent versions sooner: hidden objects would be freed before
    a restore); rules that cannot be read are logged, not guessed."""
    if not isinstance(objects, DetectingStore) or not hasattr(objects, "lifecycle_rules"):
        return
    if (await objects.detect()).versioning != "Enabled":
        return
    rules = await objects.lifecycle_rules()
    if rules is None:
        log.warning(
            "undo.lifecycle_unreadable",
            window_s=window,
            fix="grant s3:GetLifecycleConfiguration so the sweeper can check "
            "that no lifecycle rule frees hidden versions before the undo "
            "window ends",
        )
        return
    conflicts = lifecycle_conflicts(rules, root.rstrip("/") + "/", window)
    if conflicts:
        span = f"{window / 86400:g} days" if window >= 86400 else f"{window:g} s"
        raise ConfigError(
            f"an --undo-window of {span} cannot be kept: {'; '.join(conflicts)}, "
            "so a hidden object could be gone before the window ends; lower "
            "--undo-window or lengthen the rule"
        )


@contextlib.asynccontextmanager
async def _undo_keeper(
    settings: SweepSettings, kv: EtcdKV | None, objects: BucketStore
) -> AsyncIterator[UndoKeeper | None]:
    """The keeper of the undo window (None without one, or in a dry run): the delete
    markers l0gc wrote, read from the journal (the local segments, and those shipped in
    the last window and `LEDGER_MARGIN_S`; the rest once, if a round meets an older
    marker), and M's history in etcd (`MHistory`, on the runtime's client)."""
    window = settings.round.undo_window_s
    if not window or settings.round.dry_run:
        yield None
        return
    if settings.journal.directory is None:
        raise ConfigError(
            f"--undo-window {window:g}s needs --journal-dir DIR: the journal "
            "names the delete markers l0gc wrote"
        )
    await check_lifecycle(objects, settings.round.layout.root, window)
    keeper = UndoKeeper(window)
    local = Path(settings.journal.directory)
    found = keeper.ledger.load(read_journal([local])) if local.is_dir() else 0  # noqa: ASYNC240 - once, at start
    if settings.journal.prefix is not None:
        prefix = check_audit_prefix(settings.journal.prefix, settings.round.layout.root)
        since = time.time() - window - LEDGER_MARGIN_S
        shipped = await read_journal_objects(
            objects, prefix, max_bytes=MAX_SEGMENT_READ, newer_than=since
        )
        found += keeper.ledger.load(shipped)
        keeper.ledger_from = since
        keeper.load_rest = functools.partial(
            read_journal_objects, objects, prefix, max_bytes=MAX_SEGMENT_READ
        )
    log.info("undo.ledger_loaded", markers=found, keys=len(keeper.ledger.markers), window_s=window)
    if kv is not None and settings.etcd is not None:
        from gcd.undo.mhistory import MHistory  # noqa: PLC0415 - only with an undo window

        keeper.history = MHistory(kv, settings.etcd.namespace, window)
    yield keeper


@dataclass(eq=False)
class SweepRuntime:
    """The pieces of a sweeping process, opened and owned together (the module docstring)."""

    settings: SweepSettings
    sweeper: Sweeper
    """The sweeper; setting its `stop` ends a round (and the daemon) cleanly."""
    source: BoundSource | None
    """M through the binding (followed with a watch in a daemon); None without etcd."""
    kv: EtcdKV | None
    """The one etcd client (None without etcd)."""
    objects: BucketStore
    """The open store (the sweeper's, and the claim and journal store)."""

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        settings: SweepSettings,
        *,
        plan: PlanWriter | None = None,
        follow_every: int = 0,
        check_interval_s: float = 0.0,
        preflight: bool = False,
        check_namespace: bool = False,
        wrap: Callable[[BucketStore], BucketStore] | None = None,
        metrics: bool = True,
    ) -> AsyncIterator[SweepRuntime]:
        """Open everything (the module docstring), yield the runtime, close it all.

        `preflight`: list the store once first (ConfigError, exit 2, for what only the
        operator can fix). `check_namespace`: refuse a namespace with nothing stored.
        `follow_every` > 0 (a daemon): M is followed with an etcd watch, checked every
        `follow_every` reads, at most once per `check_interval_s` (`l0gc.etcd.follow`).
        `metrics=False` (a one-shot round, which exports none): no `SweeperMetrics` and
        no hook, so prometheus_client is never imported."""
        if preflight:
            await preflight_store(settings.store, settings.round.layout.listing_root)
        sweeper_id = new_sweeper_id()
        gauges, hook = hook_of(None, DEFAULT_HOOK if metrics else None)
        async with contextlib.AsyncExitStack() as stack:
            kv, watermarks = await stack.enter_async_context(
                etcd_client(settings.etcd, check_namespace=check_namespace)
            )
            objects = await stack.enter_async_context(open_store(settings.store))
            if wrap is not None:  # the demo counts what the sweeper asks of the store
                objects = wrap(objects)
            sinks = await stack.enter_async_context(
                _journal(settings, sweeper_id, kv, objects, metrics=gauges, hook=hook)
            )
            undo = await stack.enter_async_context(_undo_keeper(settings, kv, objects))
            source = me = None
            if watermarks is not None:
                follower = None
                if follow_every:
                    follower = GcFollower(
                        watermarks, verify_every=follow_every, check_interval_s=check_interval_s
                    )
                    stack.push_async_callback(follower.close)
                shard = settings.shard
                rate = settings.round.max_deletes_per_second
                me = None if shard is None else announcement(sweeper_id, *shard, rate=rate)
                source = BoundSource(
                    watermarks, settings.target, objects, shard=me, follower=follower
                )
            sweeper = Sweeper(
                objects,
                settings.round,
                plan=plan,
                brake=brake_for(source),
                metrics=gauges,
                hook=hook,
                sinks=sinks,
                undo=undo,
                sweeper_id=sweeper_id,
            )
            if me is not None and watermarks is not None:
                sweeper.after_round = UsageRecorder(
                    watermarks.kv,
                    usage_key(watermarks.namespace, me.shard_index, me.shard_count),
                    settings.price_table,
                )
                await stack.enter_async_context(
                    announced(
                        watermarks,
                        watermarks.kv,
                        me,
                        ttl_s=settings.shard_ttl_s,
                        now=Announcing(objects, sweeper),
                    )
                )
            yield cls(settings, sweeper, source, kv, objects)

    async def run_round(self) -> RoundResult:
        """One round: read M through the safety rails, then list and delete (or say why not)."""
        return await run_round(
            self.sweeper, SafetyGate(), self.source, override=self.settings.safe_epoch_override
        )

    def daemon(self, config: DaemonConfig) -> Daemon:
        """The loop of rounds on this runtime's sweeper (it stops with `sweeper.stop`)."""
        from gcd.service.daemon import Daemon  # noqa: PLC0415 - `gcd sweep` never needs it

        return Daemon(self.sweeper, self.source, config, override=self.settings.safe_epoch_override)

    async def serve(
        self, daemon: Daemon, host: str, port: int, *, tokens: TokenFile | None = None
    ) -> None:
        """Run `daemon` with its HTTP server (/metrics, /healthz, /readyz, /v1/explain,
        /plot.svg) until its sweeper's `stop` is set; signals are the caller's."""
        from gcd.explainer.http import ExplainRoute  # noqa: PLC0415
        from gcd.service.daemon import serve  # noqa: PLC0415 - aiohttp.web: for daemons only

        settings = self.settings
        layout = settings.round.layout
        source = self.source
        # Explain reads M in full, beside the daemon's followed view (never through it).
        plain = None if source is None else BoundSource(source.store, source.target, source.objects)
        journal = settings.journal
        explain = ExplainRoute(
            self.objects,
            plain,
            layout,
            settings.round.grace_s,
            settings.safe_epoch_override,
            journal.segments(self.objects, layout.root),
            None if journal.prefix is None else journal.prefix.strip("/"),
            host,
            tokens,
        )
        await serve(
            daemon,
            host,
            port,
            handle_signals=False,
            routes=[*explain.routes(), ("/plot.svg", _plot_route(daemon, explain))],
        )


def _plot_route(daemon: Daemon, access: Any) -> Callable[[Any], Awaitable[Any]]:
    """GET /plot.svg: M against the cluster epoch over the daemon's last hours
    (`gcd.observe.trail`, `gcd.rules.mplot`), to the callers /v1/explain answers."""
    from aiohttp import web  # noqa: PLC0415 - for daemons only

    from gcd.rules.mplot import render_svg  # noqa: PLC0415

    async def plot(request: web.Request) -> web.Response:
        refused: web.Response | None = access.refusal(request)
        if refused is not None:
            return refused
        namespace = "" if daemon.source is None else getattr(daemon.source, "namespace", "")
        svg = render_svg(
            daemon.trail.samples(),
            time.time(),
            title=f"M and the cluster epoch {namespace}".rstrip(),
        )
        return web.Response(
            text=svg, content_type="image/svg+xml", headers={"Cache-Control": "no-store"}
        )

    return plot
