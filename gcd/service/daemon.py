"""The long-running sweeper: rounds forever, paced so LIST calls follow the garbage.

Design notes: docs/internals/sweep.md, `gcd.service.daemon`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import structlog
from aiohttp import web

from gcd.observe.events import DeleteBasis
from gcd.observe.report import RoundResult
from gcd.observe.telemetry import (
    DAEMON_EVENTS,
    AdmissionShown,
    RoundNotListed,
    StalenessShown,
    WatermarkAgeShown,
)
from gcd.observe.trail import MTrail
from gcd.rules.admission import RoundAdmission, SafetyGate, admit, unreachable
from gcd.sweep.safety import WatermarkSource, read_admission
from gcd.sweep.sweeper import Sweeper
from l0gc.contract.safe_epoch import SafeEpoch
from l0gc.errors import ConfigError, L0gcError
from l0gc.events import Emitter
from l0gc.process.signals import STOP_SIGNALS, StopOnSignals

__all__ = [
    "Daemon",
    "DaemonConfig",
    "ListReason",
    "ListState",
    "RoundKind",
    "make_app",
    "next_delay",
    "serve",
    "should_list",
    "wake_reason",
]

log = structlog.get_logger("gcd.daemon")


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """Pacing of the daemon loop (seconds)."""

    interval_s: float = 10.0
    idle_interval_s: float = 60.0
    max_interval_s: float = 600.0
    full_pass_interval_s: float = 600.0
    unready_after_s: float = 300.0
    stale_after_s: float = 2400.0
    """Not ready when no round completed, or a read M waited unapplied, this long."""
    jitter: float = 0.1
    follow_poll_s: float = 2.0
    """While waiting, how often etcd is looked at (gauges, M advancing, resume)."""

    def __post_init__(self) -> None:
        if not 0 <= self.interval_s <= self.idle_interval_s <= self.max_interval_s:
            msg = (
                f"intervals must satisfy 0 <= --interval ({self.interval_s}) <= --idle-interval "
                f"({self.idle_interval_s}) <= --max-interval ({self.max_interval_s}); fix them"
            )
            raise ConfigError(msg)
        if self.full_pass_interval_s < 0 or self.unready_after_s < 0 or not 0 <= self.jitter <= 1:
            raise ConfigError("--full-pass-interval and --unready-after must be >= 0")
        if not self.stale_after_s > 0:
            raise ConfigError(f"--stale-after {self.stale_after_s!r} s must be > 0")
        if not self.follow_poll_s > 0:
            raise ConfigError(f"follow poll interval {self.follow_poll_s!r} s must be > 0")


@runtime_checkable
class PeekingSource(WatermarkSource, Protocol):
    """A source that can read M for a decision that deletes nothing more cheaply
    (`gcd.sweep.binding.BoundSource.peek_safe_epoch`: no claim objects read)."""

    async def peek_safe_epoch(self) -> SafeEpoch:
        """M as `read_safe_epoch` gives it, for the daemon's looks and idle checks."""
        ...


class ListReason(enum.Enum):
    """Why a round lists."""

    FIRST_ROUND = "first_round"
    SAFE_EPOCH_ADVANCED = "safe_epoch_advanced"
    YOUNG_AGED = "young_aged"
    INCOMPLETE = "incomplete"
    FULL_PASS_DUE = "full_pass_due"  # noqa: S105 - not a password


class RoundKind(enum.Enum):
    """How an iteration went, for pacing."""

    PROGRESS = "progress"
    IDLE = "idle"
    BLOCKED = "blocked"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class ListState:
    """What the daemon remembers of its last listing."""

    listed_safe_epoch: int | None = None
    listed_at_s: float | None = None
    young_ready_at_s: float | None = None
    complete: bool = True


def should_list(
    state: ListState, safe_epoch: int, now_s: float, full_pass_interval_s: float
) -> ListReason | None:
    """Why this iteration must list, or None when listing cannot find anything new."""
    if state.listed_safe_epoch is None or state.listed_at_s is None:
        return ListReason.FIRST_ROUND
    if safe_epoch > state.listed_safe_epoch:
        return ListReason.SAFE_EPOCH_ADVANCED
    if not state.complete:
        return ListReason.INCOMPLETE
    if state.young_ready_at_s is not None and now_s >= state.young_ready_at_s:
        return ListReason.YOUNG_AGED
    if now_s - state.listed_at_s >= full_pass_interval_s:
        return ListReason.FULL_PASS_DUE
    return None


def next_delay(
    kind: RoundKind,
    config: DaemonConfig,
    *,
    consecutive_errors: int = 0,
    young_ready_at_s: float | None = None,
    now_s: float = 0.0,
    uniform: float = 0.0,
) -> float:
    """Seconds to wait before the next iteration; `uniform` in [0, 1) drives the jitter."""
    if kind is RoundKind.PROGRESS:
        base = config.interval_s
    elif kind is RoundKind.ERROR:
        exponent = min(max(consecutive_errors, 1) - 1, 30)
        base = min(config.max_interval_s, config.idle_interval_s * 2.0**exponent)
    else:
        base = config.idle_interval_s
        if kind is RoundKind.IDLE and young_ready_at_s is not None:
            base = min(base, max(0.0, young_ready_at_s - now_s))
    return base * (1.0 + config.jitter * uniform)


def wake_reason(
    kind: RoundKind,
    look: RoundAdmission,
    state: ListState,
    *,
    since_listing_s: float,
    interval_s: float,
) -> str | None:
    """Why a look during the wait after a `kind` iteration ends the wait; None: wait on.

    A blocked or paused daemon wakes as soon as it may delete; an idle or busy one when
    M advanced past its last listing, but not before `interval_s` after that listing
    began (`since_listing_s`; a debounce: M advancing every second still gives one round
    per interval). The debounce counts from the listing, not from the iteration that
    just ended: an idle iteration lists nothing, so M moving just after one is followed
    at the next look (it waited up to `interval_s` + a poll, ~12 s, before issue 43).
    After an error, the backoff stands.
    """
    if kind is RoundKind.ERROR or not look.allowed:
        return None
    if kind is RoundKind.BLOCKED:
        return "may_delete_again"
    assert look.safe_epoch is not None
    listed = state.listed_safe_epoch
    if listed is not None and look.safe_epoch > listed and since_listing_s >= interval_s:
        return ListReason.SAFE_EPOCH_ADVANCED.value
    return None


class Daemon:
    """The loop: `run_once` is one iteration, `run` repeats it until `stop` is set."""

    def __init__(
        self,
        sweeper: Sweeper,
        source: WatermarkSource | None,
        config: DaemonConfig,
        *,
        override: int | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        if source is None and override is None:
            raise ConfigError("the daemon needs etcd (--etcd) or --safe-epoch")
        if sweeper.metrics is None:
            raise ConfigError("the daemon serves /metrics: its sweeper needs SweeperMetrics")
        self.sweeper = sweeper
        self.metrics = sweeper.metrics
        """What /metrics serves (fed through the sweeper's hook, not by the daemon)."""
        self._emit = Emitter(sweeper.hook, DAEMON_EVENTS)
        self.stop = sweeper.stop
        self.source = source
        self.config = config
        self.override = override
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.gate = SafetyGate()
        self.state = ListState()
        self.consecutive_errors = 0
        self.last_good: SafeEpoch | None = None
        self.last_good_at_s: float | None = None
        self.etcd_failing_since_s: float | None = None
        self.admission: RoundAdmission | None = None
        self.iterations = 0
        self.last_result: RoundResult | None = None
        self.paused = False
        """True when the last iteration was held by a pause."""
        self.last_kind = RoundKind.IDLE
        """How the last iteration went (it decides what may end the wait after it)."""
        self.started_at_s = clock()
        self.last_round_end_s: float | None = None
        """When the last iteration completed (any outcome); None before the first."""
        self.unapplied_since_s: float | None = None
        """Since when an M above the last listed one has been read and not applied."""
        self.trail = MTrail()
        """M, the cluster epoch and the pinning partition, sampled (GET /plot.svg)."""

    # -- health -----------------------------------------------------------------------

    def seconds_since_good_watermark(self) -> float:
        """Seconds since etcd last answered (0 without etcd)."""
        if self.source is None:
            return 0.0
        if self.last_good_at_s is None:
            return float("inf")
        return max(0.0, self.clock() - self.last_good_at_s)

    def seconds_since_last_round(self) -> float:
        """Seconds since the last iteration completed (since the start before the first)."""
        return max(0.0, self.clock() - (self.last_round_end_s or self.started_at_s))

    def unapplied_seconds(self) -> float:
        """Seconds a read M above the last listed one has waited for a round (0: none)."""
        since = self.unapplied_since_s
        return 0.0 if since is None else max(0.0, self.clock() - since)

    def _note_unapplied(self, admission: RoundAdmission) -> None:
        read, listed = admission.safe_epoch, self.state.listed_safe_epoch
        if admission.allowed and read is not None and listed is not None and read > listed:
            if self.unapplied_since_s is None:
                self.unapplied_since_s = self.clock()
        else:
            self.unapplied_since_s = None

    def show_staleness(self) -> None:
        """Refresh the two staleness gauges (each scrape, each iteration)."""
        self._emit(StalenessShown(self.seconds_since_last_round(), self.unapplied_seconds()))

    def show_watermark_age(self) -> None:
        """Refresh the seconds-since-a-good-M gauge (each scrape, each etcd read)."""
        self._emit(WatermarkAgeShown(min(self.seconds_since_good_watermark(), 1e12)))

    def readiness(self) -> tuple[bool, str]:
        """(ready, why): not ready while blocked, stalled, or etcd is down too long."""
        stale = self.config.stale_after_s
        since = self.seconds_since_last_round()
        if since > stale:
            what = (
                "no round has completed"
                if self.last_round_end_s is None
                else ("no round completed")
            )
            return False, (
                f"stalled: {what} for {since:.0f}s (--stale-after {stale:g}s): "
                "the store is not answering the round (see sweep.list_failed, "
                "sweep.listing_broken, sweep.round_deadline in the log)"
            )
        waited = self.unapplied_seconds()
        if waited > stale:
            read = None if self.admission is None else self.admission.safe_epoch
            return False, (
                f"stalled: M {read} read {waited:.0f}s ago is not applied yet "
                f"(last round listed M {self.state.listed_safe_epoch}; "
                f"--stale-after {stale:g}s)"
            )
        if self.admission is None:
            return False, "no round yet"
        if self.admission.blocked_reason is not None and not self.admission.paused:
            return False, f"blocked: {self.admission.blocked_reason}"
        if (
            self.etcd_failing_since_s is not None
            and self.seconds_since_good_watermark() > self.config.unready_after_s
        ):
            return False, "etcd unreachable for longer than --unready-after"
        return True, "paused" if self.admission.paused else "ok"

    # -- the loop -----------------------------------------------------------------------

    async def read_safe_epoch(self) -> SafeEpoch:
        """A fresh etcd read, or the last good one (logged) while etcd is unreachable.

        This is the daemon's `WatermarkSource` for `read_admission`: it raises only
        when etcd is unreachable and no read succeeded yet (the round is then blocked).
        """
        return await self._read(quiet=False)

    async def _read(self, *, quiet: bool, peek: bool = False) -> SafeEpoch:
        """`read_safe_epoch`; `quiet` (the looks between iterations) logs failures at debug;
        `peek`: through the source's `peek_safe_epoch` when it has one (no claim reads)."""
        assert self.source is not None
        reader = self.source.read_safe_epoch
        if peek and isinstance(self.source, PeekingSource):
            reader = self.source.peek_safe_epoch
        try:
            read = await reader()
        except (L0gcError, OSError) as exc:
            now = self.clock()
            if self.etcd_failing_since_s is None:
                self.etcd_failing_since_s = now
            stale = None if self.last_good is None else self.last_good.safe_epoch
            since = round(self.seconds_since_good_watermark(), 1)
            emit = log.debug if quiet else log.warning
            emit(
                "daemon.etcd_unreachable",
                error=str(exc),
                using_safe_epoch=stale,
                seconds_since_good=since,
            )
            if self.last_good is None:
                raise
            return self.last_good
        self.last_good, self.last_good_at_s = read, self.clock()
        if self.etcd_failing_since_s is not None:
            log.info("daemon.etcd_reachable_again")
        self.etcd_failing_since_s = None
        return read

    async def look(self) -> RoundAdmission:
        """Read etcd between iterations: refresh the gauges and readiness, delete nothing.

        The read is judged like a round's (`admit`, against the highest M used) without
        counting as one: no round outcome, and the highest M used is not raised.
        """
        try:
            read = await self._read(quiet=True, peek=True)
        except (L0gcError, OSError) as exc:
            admission = unreachable(str(exc))
        else:
            admission = admit(read, override=self.override, highest_used=self.gate.highest)
        self.admission = admission
        self._show(admission)
        self._note_unapplied(admission)
        return admission

    def _show(self, admission: RoundAdmission) -> None:
        """The gauges for an admission: M when allowed, NaN and blocked/paused otherwise."""
        self.show_watermark_age()
        self._emit(AdmissionShown.of(admission))

    async def run_once(self) -> float:
        """One iteration; returns the seconds to wait before the next."""
        try:
            return await self._iteration()
        finally:
            self.last_round_end_s = self.clock()
            if self.admission is not None:
                self._note_unapplied(self.admission)
            self.show_staleness()

    async def _iteration(self) -> float:
        self.iterations += 1
        self.paused = False
        now = self.clock()
        peeking = isinstance(self.source, PeekingSource)
        source: WatermarkSource | None = None
        if self.source is not None:
            source = _Peek(self) if peeking else self
        if not await self._admit(source):
            return self._delay(RoundKind.BLOCKED)
        safe_epoch = self.admission.safe_epoch if self.admission is not None else None
        assert safe_epoch is not None
        reason = should_list(self.state, safe_epoch, now, self.config.full_pass_interval_s)
        if reason is None:
            self._emit(RoundNotListed("idle"))
            log.debug("daemon.listing_skipped", safe_epoch=safe_epoch)
            return self._delay(RoundKind.IDLE)
        if peeking and not await self._admit(self):  # the claims, read before any delete
            return self._delay(RoundKind.BLOCKED)
        assert self.admission is not None
        assert self.admission.safe_epoch is not None
        safe_epoch = self.admission.safe_epoch
        log.info("daemon.round", reason=reason.value, safe_epoch=safe_epoch)
        try:
            basis = DeleteBasis.of(self.admission, override=self.override is not None)
            result = await self.sweeper.sweep(safe_epoch, self.admission.cluster_epoch, basis=basis)
        except Exception as exc:  # a daemon logs a failed round and backs off
            log.exception("daemon.round_failed", error=repr(exc))
            self._emit(RoundNotListed("error"))
            self.consecutive_errors += 1
            self.state = ListState(
                self.state.listed_safe_epoch,
                self.state.listed_at_s,
                self.state.young_ready_at_s,
                complete=False,
            )
            return self._delay(RoundKind.ERROR)
        self.last_result = result
        self.state = ListState(safe_epoch, now, result.young_ready_at_s, result.complete)
        summary = result.summary
        if summary.blocked_reason is not None:  # the brake stopped the round (a pause...)
            self.paused = True
            return self._delay(RoundKind.BLOCKED)
        if summary.errors:
            self.consecutive_errors += 1
            return self._delay(RoundKind.ERROR)
        self.consecutive_errors = 0
        progress = summary.deleted > 0 or (summary.eligible > 0 and not result.complete)
        return self._delay(RoundKind.PROGRESS if progress else RoundKind.IDLE)

    async def _admit(self, source: WatermarkSource | None) -> bool:
        """Read M through `source` and the safety rails; False (and shown) when blocked."""
        try:
            self.admission = await read_admission(self.gate, source, override=self.override)
        finally:
            self.show_watermark_age()
        self.trail.observe(self.clock(), self.admission)
        if not self.admission.allowed:
            self.sweeper.blocked(self.admission)
            self.paused = self.admission.paused
            return False
        self._emit(AdmissionShown.of(self.admission))
        return True

    def _delay(self, kind: RoundKind) -> float:
        self.last_kind = kind
        return next_delay(
            kind,
            self.config,
            consecutive_errors=self.consecutive_errors,
            young_ready_at_s=self.state.young_ready_at_s,
            now_s=self.clock(),
            uniform=self.rng.random(),
        )

    async def run(self) -> None:
        """Iterate until `stop` is set; waits are cut short by `stop`."""
        follower = getattr(self.source, "follower", None)
        checks = (
            {}
            if follower is None
            else {
                "verify_m_every": follower.verify_every,
                "check_interval_s": follower.check_interval_s,
            }
        )
        log.info(
            "daemon.started",
            prefixes=len(self.sweeper.config.prefixes()),
            dry_run=self.sweeper.config.dry_run,
            **checks,
        )
        while not self.stop.is_set():
            delay = await self.run_once()
            if self.stop.is_set():
                break
            await self._wait(delay, self.last_kind)
        log.info("daemon.stopped", iterations=self.iterations)

    async def _wait(self, delay: float, kind: RoundKind) -> None:
        """Wait `delay` seconds, less if `stop` is set or a look says to wake (`wake_reason`)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            left = delay - (loop.time() - started)
            if left <= 0:
                return
            step = left if self.source is None else min(left, self.config.follow_poll_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), timeout=step)
            if self.stop.is_set():
                return
            if self.source is None:
                continue
            look = await self.look()
            waited = loop.time() - started
            listed_at = self.state.listed_at_s
            since = waited if listed_at is None else max(waited, self.clock() - listed_at)
            why = wake_reason(
                kind, look, self.state, since_listing_s=since, interval_s=self.config.interval_s
            )
            if why is not None:
                log.info(
                    "daemon.woken",
                    reason=why,
                    safe_epoch=look.safe_epoch,
                    waited_s=round(loop.time() - started, 2),
                )
                return


class _Peek:
    """The daemon read through its source's `peek_safe_epoch` (an iteration's first
    admission: if it does not list, it deletes nothing and needs no claim read)."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon

    async def read_safe_epoch(self) -> SafeEpoch:
        return await self._daemon._read(quiet=False, peek=True)


# -- HTTP: /metrics /healthz /readyz ----------------------------------------------------


Route = tuple[str, Callable[[web.Request], Awaitable[web.StreamResponse]]]
"""An extra GET route of the daemon's port (`gcd.explainer.http`: /v1/explain)."""


def make_app(
    daemon: Daemon, loop_task: Callable[[], asyncio.Task[None] | None], routes: Sequence[Route] = ()
) -> web.Application:
    """The daemon's HTTP endpoints; `loop_task` returns the loop's task for /healthz."""

    async def metrics(_request: web.Request) -> web.Response:
        daemon.show_watermark_age()
        daemon.show_staleness()
        return web.Response(
            body=daemon.metrics.render(), headers={"Content-Type": daemon.metrics.content_type}
        )

    async def healthz(_request: web.Request) -> web.Response:
        task = loop_task()
        if task is not None and task.done():
            return web.Response(status=500, text="sweeper loop ended\n")
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        ready, why = daemon.readiness()
        return web.Response(status=200 if ready else 503, text=why + "\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    for path, handler in routes:
        app.router.add_get(path, handler)
    return app


async def serve(
    daemon: Daemon,
    host: str,
    port: int,
    *,
    handle_signals: bool = True,
    routes: Sequence[Route] = (),
) -> int:
    """Run the loop with its HTTP server until SIGTERM/SIGINT (or `stop`); return 0."""
    task: asyncio.Task[None] | None = None
    runner = web.AppRunner(make_app(daemon, lambda: task, routes), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}); "
            "pick another --http-port or --http-host"
        ) from exc
    bound = runner.addresses[0][1] if runner.addresses else port
    log.info("daemon.http_listening", host=host, port=bound)
    signals = STOP_SIGNALS if handle_signals else ()
    stopper = StopOnSignals(
        daemon.stop, on_signal=lambda signum: log.info("daemon.stopping", signal=signum.name)
    )
    try:
        with stopper.installed(signals):
            task = asyncio.create_task(daemon.run())
            await task
    finally:
        await runner.cleanup()
    return 0
