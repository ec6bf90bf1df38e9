"""The outcome of a chaos run: the `--json` document, the text report, the exit code."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final

from l0gc import exitcodes
from l0lab.chaos.config import parse_faults

__all__ = ["REPORT_VERSION", "ChaosReport", "exit_code", "replay_command", "text_report"]

REPORT_VERSION: Final = 1


@dataclass(slots=True)
class ChaosReport:
    """What `gcd chaos` found (`--json`)."""

    version: int = REPORT_VERSION
    ok: bool = False
    interrupted: bool = False
    seed: int = 0
    duration_s: float = 0.0
    elapsed_s: float = 0.0
    faulty_phase_s: float = 0.0
    broken_build: str | None = None
    faults_enabled: list[str] = field(default_factory=list)
    faults_injected: int = 0
    faults_not_injected: list[str] = field(default_factory=list)
    """Enabled kinds the run never injected (each kind comes once before any repeats,
    so only a run too short for all of them leaves some out)."""
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    recovery_bound_s: float = 0.0
    longest_recovery_s: float | None = None
    publisher_replicas: int = 0
    ownership_changes: int = 0
    """Times a publisher-served partition changed owner (owner_epoch bumps after the
    first adoption): kills, SIGTERMs and freezes that moved partitions, failovers."""
    objects_written: int = 0
    objects_committed: int = 0
    orphans: int = 0
    puts_cut_short: int = 0
    """Uploads whose PUT had no answer when their writer was killed: they may never have
    reached the store, so their absence is not judged."""
    objects_deleted: int = 0
    live_lost: int = 0
    garbage_left: int = 0
    max_epoch_written: int | None = None
    final_m: int | None = None
    cluster_epoch: int | None = None
    longest_write_unavailability_s: float = 0.0
    longest_write_unavailability_partition: str | None = None
    longest_m_stall_after_fault_s: float = 0.0
    fencing_violations: int = 0
    list_requests: int = 0
    delete_requests: int = 0
    s3_faults: dict[str, int] = field(default_factory=dict)
    journal: dict[str, Any] = field(default_factory=dict)
    stopped_early: str | None = None
    problems: list[str] = field(default_factory=list)
    losses: list[dict[str, Any]] = field(default_factory=list)
    replay: str = ""
    run_dir: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def replay_command(
    seed: int, duration_s: float, faults: list[str], broken: str | None, replicas: int = 0
) -> str:
    """The command that replays this run's schedule."""
    everything = sorted(kind.value for kind in parse_faults("all", replicated=bool(replicas)))
    kinds = "all" if faults == everything else (",".join(faults) or "none")
    parts = [f"gcd chaos --seed {seed} --duration {duration_s:g}s --faults {kinds}"]
    if replicas:
        parts.append(f"--publisher-replicas {replicas}")
    if broken is not None:
        parts.append(f"--broken-build {broken}")
    return " ".join(parts)


def exit_code(report: ChaosReport) -> int:
    """0 only when the checker passed; 130 interrupted; 1 otherwise."""
    if report.interrupted and not report.live_lost:
        return exitcodes.INTERRUPTED
    return exitcodes.OK if report.ok else exitcodes.PARTIAL_FAILURE


def _shown(value: object) -> str:
    return "-" if value is None else str(value)


def text_report(report: ChaosReport) -> str:
    """A few lines for people."""
    verdict = "OK" if report.ok else ("INTERRUPTED" if report.interrupted else "FAILED")
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(report.faults_by_kind.items()))
    build = f" (broken build: {report.broken_build})" if report.broken_build else ""
    lines = [
        f"l0gc chaos: {verdict} after {report.elapsed_s:.1f} s, seed {report.seed}{build}",
        f"  faults    {report.faults_injected} injected: {kinds or 'none'}"
        + (
            f"; not injected (run too short): {', '.join(report.faults_not_injected)}"
            if report.faults_not_injected
            else ""
        ),
        (
            f"  owners    {report.ownership_changes} ownership changes of publisher partitions"
            + (f" ({report.publisher_replicas} replicas)" if report.publisher_replicas else "")
        ),
        (
            f"  recovery  longest {_shown(report.longest_recovery_s)} s (bound "
            f"{report.recovery_bound_s:g} s); longest write unavailability "
            f"{report.longest_write_unavailability_s:.1f} s; longest M stall after a fault "
            f"{report.longest_m_stall_after_fault_s:.1f} s"
        ),
        (
            f"  objects   written {report.objects_written}, committed {report.objects_committed}, "
            f"orphans {report.orphans}, deleted {report.objects_deleted}, PUTs cut short by a "
            f"kill {report.puts_cut_short}"
        ),
        (
            f"  verified  live objects lost: {report.live_lost}; garbage left at or below the "
            f"final M {_shown(report.final_m)}: {report.garbage_left} (newest epoch written "
            f"{_shown(report.max_epoch_written)}, cluster epoch {_shown(report.cluster_epoch)})"
        ),
        (
            f"  journal   {report.journal.get('attempts', 0)} delete requests, "
            f"{report.journal.get('keys_deleted', 0)} keys, "
            f"{report.journal.get('revisions_checked', 0)} etcd revisions and "
            f"{report.journal.get('anchors_checked', 0)} journal ends anchored in etcd checked: "
            f"{report.journal.get('violations', 0)} violations"
        ),
        (
            f"  S3        {report.list_requests} LIST and {report.delete_requests} DELETE "
            f"requests through the fault proxy"
        ),
    ]
    if report.stopped_early:
        lines.append(f"  stopped   the faulty phase early: {report.stopped_early}")
    lines.extend(f"  problem   {problem}" for problem in report.problems[:30])
    lines.extend(
        f"  LOST      {loss['key']} (partition {loss['partition']}, epoch "
        f"{loss['epoch']}: {loss['how']})"
        for loss in report.losses[:10]
    )
    lines.append(f"  replay    {report.replay}")
    if report.run_dir:
        lines.append(f"  run dir   {report.run_dir} (logs, partition logs, histories, journal)")
    return "\n".join(lines) + "\n"
