"""One chaos run, phase by phase.

*starting*: the cluster comes up (`l0lab.chaos.cluster`), the reconcilers, the monitor and
the view start. *faults*: the nemesis injects faults for `duration_s`
(`l0lab.chaos.nemesis`), ending early at the first live object lost unless told not to.
*quiescing*: every fault is healed and every process runs again; the writers stop (the
writes in flight are resolved); every object an unreconciled entry references is read
back (HEAD, straight from the S3 server); the reconcilers catch up completely, so
everything written is garbage, and the publishers' idle advances lift M past the newest
epoch; the grace period passes. *final rounds*: the sweeper daemons stop cleanly and
one `gcd sweep` per shard runs with the final M. *verifying*: the bucket is listed, the
journal is verified against etcd's history (`gcd journal verify`'s checks), and the
checker (`l0lab.chaos.checker`) judges the whole history. Everything started is stopped
by PID at the end; the run directory is removed unless the run failed or `keep_run_dir`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO, cast

import aiohttp
import structlog

from gcd.journal.check import (
    FindingKind,
    VerifyReport,
    check_anchors,
    check_history,
    check_records,
    history_reader,
)
from gcd.journal.records import JournalRead, read_journal
from gcd.rules.layout import KeyLayout
from l0gc.contract.journal_anchor import JournalAnchor, anchors_prefix
from l0gc.contract.kv import KV
from l0gc.contract.record import PartitionRecord
from l0gc.errors import L0gcError
from l0lab.chaos.checker import RunFacts, RunHistory, check_run, deletions_of, unanswered_of
from l0lab.chaos.cluster import EMBEDDED, NAMESPACE, Cluster
from l0lab.chaos.config import ChaosConfig
from l0lab.chaos.monitor import Monitor
from l0lab.chaos.nemesis import Nemesis
from l0lab.chaos.reconciler import Reconcilers
from l0lab.chaos.records import History, PartitionLog, log_path, read_lines
from l0lab.chaos.report import ChaosReport, replay_command
from l0lab.chaos.view import ChaosView, Progress
from l0lab.demo.s3io import DemoBucket
from l0lab.testing.procs import child_env

__all__ = ["ChaosRun"]

_log = structlog.get_logger("gcd.chaos")
_SETTLE_S = 45.0
_HEAD_CONCURRENCY = 16


class ChaosRun:
    """One run; `run(stop)` returns the report. See the module docstring."""

    def __init__(self, config: ChaosConfig, *, stream: TextIO, tty: bool) -> None:
        self.config = config
        self.stream = stream
        self.tty = tty
        self.phase = "starting"
        self.started = time.time()
        self.run_dir = config.run_dir or Path(tempfile.mkdtemp(prefix="l0gc-chaos-"))
        self.cluster = Cluster(config, self.run_dir)
        self.history = History(self.run_dir / "history" / "reconciler.jsonl")
        self.reconcilers = Reconcilers(
            self.run_dir,
            config.all_partitions,
            route=self.cluster.url,
            token=self.cluster.tokens["reconciler"],
            history=self.history,
            lag_s=config.reconcile_lag_s,
            replicas=self.cluster.replica_urls,
        )
        self.monitor = Monitor(self.cluster, self.reconcilers)
        self.nemesis = Nemesis(config, self.cluster, self.reconcilers, self.monitor)
        self.problems: list[str] = []
        self.ownership_changes = 0
        self.anchors_checked = 0

    def _note(self, phase: str) -> None:
        self.phase = phase
        if not self.tty:
            _log.info("chaos.phase", phase=phase, elapsed_s=round(time.time() - self.started, 1))

    def progress(self) -> Progress:
        """The view's sample."""
        cluster, latest = self.cluster, self.monitor.latest
        children = [
            *(p.child for p in cluster.publishers.values()),
            *(s.child for s in cluster.sweepers),
            *(w.child for w in cluster.writers.values()),
        ]
        down = [c.name for c in children if not c.alive]
        down += [f"etcd {m.name}" for m in cluster.etcd.members if m.process is None]
        current = self.nemesis.current
        committed = sum(
            1
            for feed in self.reconcilers.feeds.values()
            for entry in feed.log.entries.values()
            if entry.committed
        )
        return Progress(
            phase=self.phase,
            elapsed_s=time.time() - self.started,
            duration_s=self.config.duration_s,
            seed=self.config.seed,
            fault=None if current is None else f"{current.kind} {current.target}",
            faults=len(self.nemesis.faults),
            cluster_epoch=None if latest is None else latest.cluster_epoch,
            safe_epoch=None if latest is None else latest.safe_epoch,
            pinned_by=() if latest is None else latest.pinned_by,
            blocked_reason=None if latest is None else latest.blocked_reason,
            down=tuple(down),
            frozen=tuple(c.name for c in children if c.frozen),
            committed=committed,
            deleted=self.monitor.deleted,
            list_requests=cluster.proxy.requests["list"],
            delete_requests=cluster.proxy.requests["delete"],
            first_loss=self.monitor.first_loss,
        )

    async def run(self, stop: asyncio.Event) -> ChaosReport:
        """Every phase; on any exit, stop what was started."""
        background = asyncio.Event()
        view_stop = asyncio.Event()
        view = ChaosView(self.progress, self.stream, tty=self.tty)
        tasks: list[asyncio.Task[None]] = []
        report = ChaosReport(
            seed=self.config.seed,
            duration_s=self.config.duration_s,
            broken_build=self.config.broken_build,
            recovery_bound_s=self.config.recovery_bound_s,
        )
        session = aiohttp.ClientSession()
        self.reconcilers.session = session
        try:
            tasks.append(asyncio.create_task(view.run(view_stop)))
            await self.cluster.start()
            tasks.append(asyncio.create_task(self.reconcilers.run(background)))
            tasks.append(asyncio.create_task(self.monitor.run(background)))
            self._note("faults")
            faults_from = time.time()
            await self.nemesis.run(faults_from + self.config.duration_s, stop)
            faults_until = time.time()
            report.interrupted = stop.is_set()
            report.stopped_early = self.monitor.first_loss
            facts = await self._finish(faults_from, faults_until)
            facts.harness_problems.extend(self.cluster.problems + self.problems)
            facts.harness_problems.extend(
                f"M went backwards in a sweeper: {regression}"
                for regression in self.monitor.m_regressions
            )
            verdict = check_run(facts)
            self._fill(report, facts, verdict.counts, faults_from, faults_until)
            report.problems = verdict.problems
            report.losses = verdict.losses[:50]
            report.ok = verdict.ok and not report.interrupted
        except (RuntimeError, L0gcError, OSError) as exc:
            report.problems.append(f"the harness failed: {exc}")
            _log.exception("chaos.harness_failed")
        finally:
            view_stop.set()
            background.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.cluster.stop_all()
            await session.close()
            self.history.close()
        report.elapsed_s = round(time.time() - self.started, 1)
        faults = sorted(kind.value for kind in self.config.faults)
        report.replay = replay_command(
            self.config.seed,
            self.config.duration_s,
            faults,
            self.config.broken_build,
            self.config.publisher_replicas,
        )
        if report.ok and not self.config.keep_run_dir and self.config.run_dir is None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        else:
            report.run_dir = str(self.run_dir)
        return report

    async def _finish(self, faults_from: float, faults_until: float) -> RunFacts:
        """Quiesce, run the final rounds, and gather every fact for the checker."""
        cluster = self.cluster
        self._note("quiescing")
        await self.nemesis.heal_all()
        for name in cluster.writers:
            await cluster.writer_stop(name)
        stopped_at = time.time()
        missing = await self._read_back()
        if not await self.reconcilers.catch_up(self.reconcilers.feeds, timeout_s=60.0):
            self.problems.append("the reconcilers could not report everything within 60 s")
        ledger = self._ledger()
        await self._settle(ledger.max_epoch)
        await asyncio.sleep(max(0.0, stopped_at + self.config.grace_s + 0.5 - time.time()))
        self._note("final rounds")
        await asyncio.gather(*(asyncio.to_thread(s.child.stop, 20.0) for s in cluster.sweepers))
        await self._final_sweeps()
        self._note("verifying")
        async with DemoBucket.open(cluster.s3_settings(direct=True)) as bucket:
            present = set(await bucket.list_keys(cluster.root + "/"))
        read = read_journal([cluster.journal_dir])
        journal = check_records(read, layout=KeyLayout.default(cluster.root))
        await check_history(read, history_reader(cast(KV, cluster.kv), NAMESPACE), journal)
        await self._check_anchors(read, journal)
        assert cluster.store is not None
        final = await cluster.store.read_safe_epoch()
        self.ownership_changes = await self._ownership_changes()
        return RunFacts(
            ledger=self._ledger(),
            deletions=deletions_of(read),
            present=present,
            unanswered=unanswered_of(read),
            readback_missing=missing,
            final_m=final.safe_epoch,
            cluster_epoch=final.cluster_epoch,
            journal=journal,
            faults=self.nemesis.faults,
            m_samples=self.monitor.m_samples(),
            started_at=faults_from,
            faulty_until=faults_until,
            recovery_bound_s=self.config.recovery_bound_s,
            duration_s=faults_until - faults_from,
        )

    async def _ownership_changes(self) -> int:
        """owner_epoch bumps beyond the first adoption, over the publishers' partitions."""
        assert self.cluster.store is not None
        records = await self.cluster.store.list_partitions()
        served = (p for p, owner in self.cluster.routes.items() if owner != EMBEDDED)
        return sum(max(0, getattr(records.get(p), "owner_epoch", 1) - 1) for p in served)

    def _ledger(self) -> RunHistory:
        ledger = RunHistory()
        for path in sorted((self.run_dir / "history").glob("writer-*.jsonl")):
            ledger.add_writer_events(read_lines(path))
        for partition in self.config.all_partitions:
            ledger.add_log(partition, PartitionLog.read(log_path(self.run_dir, partition)))
        ledger.add_lifts(read_lines(self.run_dir / "history" / "reconciler.jsonl"))
        return ledger

    async def _read_back(self) -> list[str]:
        """HEAD every object an unreconciled committed entry references; the missing ones."""
        self.reconcilers.poll()
        keys = [
            entry.key
            for feed in self.reconcilers.feeds.values()
            for entry in feed.log.entries.values()
            if entry.committed and entry.offset > feed.lifted_through
        ]
        gate = asyncio.Semaphore(_HEAD_CONCURRENCY)
        async with DemoBucket.open(self.cluster.s3_settings(direct=True)) as bucket:

            async def head(key: str) -> bool:
                async with gate:
                    return await bucket.exists(key)

            found = await asyncio.gather(*(head(key) for key in keys))
        _log.info("chaos.read_back", referenced=len(keys), present=sum(found))
        return [key for key, ok in zip(keys, found, strict=True) if not ok]

    async def _settle(self, max_epoch: int | None) -> None:
        """Wait (bounded) until the global M covers the newest epoch written (briefly when
        the run has already failed: a frozen partition may pin M for good)."""
        if max_epoch is None:
            return
        deadline = time.time() + (_SETTLE_S if self.monitor.first_loss is None else 5.0)
        while time.time() < deadline:
            latest = self.monitor.latest
            if latest is not None and (latest.safe_epoch or -1) >= max_epoch:
                return
            await asyncio.sleep(0.25)
        latest = self.monitor.latest
        m = None if latest is None else latest.safe_epoch
        why = (
            "no reading"
            if latest is None
            else (latest.blocked_reason or f"pinned by {', '.join(latest.pinned_by)}")
        )
        self.problems.append(
            f"M did not reach the newest epoch written ({max_epoch}) within {_SETTLE_S:g} s "
            f"after the writers stopped and the reconcilers caught up (M = {m}, {why}; "
            f"{await self._pinning_detail()})"
        )

    async def _pinning_detail(self) -> str:
        """What the records pinning M say of themselves (owner, waiting, offsets, age): a
        settle that times out must say why without the run's logs."""
        assert self.cluster.store is not None
        try:
            read = await asyncio.wait_for(self.cluster.store.read_safe_epoch(), 5.0)
            records = await asyncio.wait_for(self.cluster.store.list_partitions(), 5.0)
        except (L0gcError, OSError, TimeoutError) as exc:
            return f"the records could not be read: {exc}"
        now = time.time()
        shown = []
        for pin in read.pinning:
            record = records.get(pin.partition)
            if not isinstance(record, PartitionRecord):
                shown.append(f"{pin.partition}: record {record}")
                continue
            tracker = record.tracker or {}
            age = None if record.updated_at is None else round(now - record.updated_at, 1)
            shown.append(
                f"{record.partition}: M(p) {record.watermark}, window {list(record.window)}, "
                f"owner {record.owner} (owner_epoch {record.owner_epoch}), "
                f"waiting {record.waiting}, applied through "
                f"{tracker.get('last_applied_offset')}, reconciled through "
                f"{tracker.get('reconciled_offset')}, written {age} s ago"
            )
        return f"cluster epoch {read.cluster_epoch}; " + "; ".join(shown or ["no pinning record"])

    async def _final_sweeps(self) -> None:
        """One `gcd sweep` per shard, concurrently; retried while blocked (old leases)."""

        async def one(index: int) -> None:
            for _attempt in range(4):
                process = await asyncio.create_subprocess_exec(
                    *self.cluster.sweep_argv(index),
                    env=child_env(),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                out, err = await process.communicate()
                summary: dict[str, Any] = {}
                try:
                    summary = json.loads(out.decode() or "{}")
                except ValueError:
                    summary = {}
                if process.returncode == 0:
                    _log.info("chaos.final_sweep", shard=index, deleted=summary.get("deleted"))
                    return
                if process.returncode != 3:
                    break
                await asyncio.sleep(self.config.shard_ttl_s + 1.0)  # a lease still to expire
            self.problems.append(
                f"the final gcd sweep of shard {index} exited "
                f"{process.returncode}: {err.decode()[-500:]}"
            )

        await asyncio.gather(*(one(s.index) for s in self.cluster.sweepers))

    async def _check_anchors(self, read: JournalRead, journal: VerifyReport) -> None:
        """Every sweeper's journal reaches the end it anchored in etcd. Only damage counts:
        a sweeper killed before its first anchor write has none, which is no fault."""
        assert self.cluster.kv is not None
        items = (await self.cluster.kv.range_prefix(anchors_prefix(NAMESPACE))).items
        anchors = {a.sweeper: a for a in (JournalAnchor.decode(i.value, i.key) for i in items)}
        found = VerifyReport()
        check_anchors(read, anchors, found, where="etcd", require_all=True)
        journal.findings.extend(f for f in found.findings if f.kind is FindingKind.DAMAGE)
        self.anchors_checked = len(anchors)

    def _fill(
        self,
        report: ChaosReport,
        facts: RunFacts,
        counts: dict[str, Any],
        faults_from: float,
        faults_until: float,
    ) -> None:
        for name, value in counts.items():
            if hasattr(report, name):
                setattr(report, name, value)
        report.faulty_phase_s = round(faults_until - faults_from, 1)
        report.publisher_replicas = self.config.publisher_replicas
        report.ownership_changes = self.ownership_changes
        report.faults_enabled = sorted(kind.value for kind in self.config.faults)
        report.faults_injected = len(facts.faults)
        report.faults_not_injected = self.nemesis.not_injected()
        report.faults = [fault.to_dict(faults_from) for fault in facts.faults]
        recoveries = [f.recovery_s for f in facts.faults if f.recovery_s is not None]
        report.longest_recovery_s = round(max(recoveries), 2) if recoveries else None
        proxy = self.cluster.proxy
        report.list_requests = proxy.requests["list"]
        report.delete_requests = proxy.requests["delete"]
        report.s3_faults = dict(proxy.faults)
        journal = facts.journal.to_dict()
        journal.pop("findings", None)
        journal["anchors_checked"] = self.anchors_checked
        report.journal = journal
