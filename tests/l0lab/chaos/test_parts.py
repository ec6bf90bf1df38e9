"""The pure parts of `gcd chaos`: fault selection, partition logs, the report, the view.

Named by behaviour, not module: the pure parts of several l0lab.chaos modules, as one suite."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from l0gc import exitcodes
from l0gc.errors import ConfigError
from l0lab.chaos.checker import FaultRecord
from l0lab.chaos.config import BROKEN_BUILDS, ChaosConfig, FaultKind, parse_faults
from l0lab.chaos.monitor import _SAFE_EPOCH, Monitor
from l0lab.chaos.nemesis import Nemesis
from l0lab.chaos.records import PartitionLog, Tail, log_path, read_lines
from l0lab.chaos.report import ChaosReport, exit_code, replay_command, text_report
from l0lab.chaos.view import Progress, render


def test_faults_are_kinds_and_groups_and_typos_are_refused() -> None:
    """--faults takes kinds and groups; an unknown name is a usage error naming it."""
    assert parse_faults("all") == frozenset(FaultKind) - {FaultKind.FORGED_MEMBER}
    assert parse_faults("all", replicated=True) == frozenset(FaultKind) - {FaultKind.FAILOVER}
    assert parse_faults("etcd,s3-drop") == {
        FaultKind.ETCD_KILL,
        FaultKind.ETCD_LEADER_KILL,
        FaultKind.ETCD_FREEZE,
        FaultKind.S3_DROP,
    }
    assert parse_faults("none") == frozenset()
    with pytest.raises(ConfigError, match="unknown fault 'etcd-kil'"):
        parse_faults("etcd-kil")


def test_replicated_publishers_leave_the_controller_failover_out() -> None:
    """With a replicated set, groups leave `failover` out, naming it is refused, and the
    replicas serve every publisher partition the two split publishers would."""
    assert FaultKind.FAILOVER not in parse_faults("all", replicated=True)
    assert parse_faults("publisher", replicated=True) == {
        FaultKind.PUBLISHER_KILL,
        FaultKind.PUBLISHER_TERM,
        FaultKind.PUBLISHER_FREEZE,
        FaultKind.TICKER_LEADER_KILL,
        FaultKind.PUBLISHER_DUP_START,
        FaultKind.FORGED_MEMBER,
    }
    with pytest.raises(ConfigError, match="--faults forged-member needs replicated"):
        ChaosConfig(faults=parse_faults("forged-member"))
    with pytest.raises(ConfigError, match="--faults failover"):
        ChaosConfig(publisher_replicas=3, faults=parse_faults("failover", replicated=True))
    with pytest.raises(ConfigError, match="--publisher-replicas 1"):
        ChaosConfig(publisher_replicas=1)
    config = ChaosConfig(publisher_replicas=3, faults=parse_faults("all", replicated=True))
    assert config.publisher_names == ("serve-a", "serve-b", "serve-c")
    assert ChaosConfig().publisher_names == ("serve-a", "serve-b")
    assert replay_command(7, 60, sorted(k.value for k in config.faults), None, 3) == (
        "gcd chaos --seed 7 --duration 60s --faults all --publisher-replicas 3"
    )


def test_the_config_refuses_what_cannot_run() -> None:
    """Too short a run or an unknown broken build is refused."""
    with pytest.raises(ConfigError, match="at least 10 s"):
        ChaosConfig(duration_s=5)
    with pytest.raises(ConfigError, match="--broken-build 'nope'"):
        ChaosConfig(broken_build="nope")
    config = ChaosConfig()
    assert len(set(config.all_partitions)) == 8
    assert set(BROKEN_BUILDS) == {"no-drain-slide", "owner-blind-publisher"}


def test_a_partition_log_survives_its_writer(tmp_path: Path) -> None:
    """Reopened, a log continues after its last offset (aborted ones are never reused) and
    lists the entries its killed writer left unresolved."""
    log = PartitionLog.open(log_path(tmp_path, "orders/1"))
    first = log.append("k0", 3, "t0")
    log.commit(first.offset)
    second = log.append("k1", 3, "t1")
    log.abort(second.offset, "fence_expired")
    third = log.append("k2", 4, "t2")
    log.close()
    with log_path(tmp_path, "orders/1").open("a") as handle:
        handle.write('{"op": "commit", "offset": 2')  # torn by a kill
    again = PartitionLog.open(log_path(tmp_path, "orders/1"))
    assert (again.next_offset, again.log_end) == (3, 2)
    assert [e.key for e in again.unresolved()] == ["k2"]
    assert again.entries[0].committed
    assert again.entries[1].resolved == "abort"
    assert third.token == "t2"
    again.close()


def test_a_tail_reads_only_complete_new_lines(tmp_path: Path) -> None:
    """Each read returns the lines completed since the last one."""
    path = tmp_path / "h.jsonl"
    tail = Tail(path)
    assert tail.read() == []
    path.write_text('{"a": 1}\n{"b"')
    assert tail.read() == [{"a": 1}]
    with path.open("a") as handle:
        handle.write(": 2}\n")
    assert tail.read() == [{"b": 2}]
    assert list(read_lines(path)) == [{"a": 1}, {"b": 2}]


def test_the_report_exit_code_and_replay_command() -> None:
    """0 only when ok; the replay command names the seed, duration, faults and build."""
    report = ChaosReport(ok=True, seed=7, problems=[])
    assert exit_code(report) == exitcodes.OK
    report.ok = False
    assert exit_code(report) == exitcodes.PARTIAL_FAILURE
    everything = sorted(kind.value for kind in parse_faults("all"))
    replay = replay_command(7, 60, everything, None)
    assert replay == "gcd chaos --seed 7 --duration 60s --faults all"
    assert replay_command(7, 60, ["failover"], "owner-blind-publisher") == (
        "gcd chaos --seed 7 --duration 60s --faults failover --broken-build owner-blind-publisher"
    )
    report.problems = ["1 live objects lost"]
    report.losses = [{"key": "k", "partition": "p", "epoch": 3, "how": "deleted while referenced"}]
    text = text_report(report)
    assert "l0gc chaos: FAILED" in text
    assert "LOST      k (partition p, epoch 3: deleted while referenced)" in text
    assert json.loads(json.dumps(report.to_dict()))["seed"] == 7


def test_the_live_view_shows_faults_processes_and_losses() -> None:
    """The view names the fault, what is down or frozen, M and the first loss."""
    progress = Progress(
        phase="faults",
        elapsed_s=12.0,
        duration_s=60.0,
        seed=3,
        fault="etcd-kill etcd m1",
        faults=2,
        cluster_epoch=20,
        safe_epoch=17,
        pinned_by=("orders/3",),
        blocked_reason=None,
        down=("etcd m1",),
        frozen=("serve-a",),
        committed=100,
        deleted=80,
        list_requests=50,
        delete_requests=9,
        first_loss=None,
    )
    lines = render(progress)
    assert "etcd-kill etcd m1" in lines[1]
    assert "lag   3" in lines[2]
    assert "pinned by orders/3" in lines[2]
    assert "down: etcd m1   frozen: serve-a" in lines[3]
    assert lines[-1].endswith("0 (ok)")


def test_the_monitor_catches_a_sweeper_whose_m_goes_down() -> None:
    """Per sweeper process, a lower M than one it used is a regression; NaN is no M."""
    monitor = Monitor(cluster=None, reconcilers=None)  # type: ignore[arg-type]
    for text in (
        "l0gc_sweeper_safe_epoch 41.0",
        "l0gc_sweeper_safe_epoch NaN",
        "l0gc_sweeper_safe_epoch 43.0",
    ):
        monitor._check_sweeper_m(0, 1, _SAFE_EPOCH.search(text))
    monitor._check_sweeper_m(0, 2, _SAFE_EPOCH.search("l0gc_sweeper_safe_epoch 40.0"))  # restarted
    assert monitor.m_regressions == []
    monitor._check_sweeper_m(0, 2, _SAFE_EPOCH.search("l0gc_sweeper_safe_epoch 39.0"))
    assert monitor.m_regressions == ["sweeper 0 (start 2) used M = 39 after M = 40"]


class _RecordingNemesis(Nemesis):
    """The real schedule (`Nemesis.run`), with each fault recorded instead of injected."""

    def __init__(self, config: ChaosConfig, limit: int) -> None:
        monitor = Monitor(cluster=None, reconcilers=None)  # type: ignore[arg-type]
        super().__init__(config, None, None, monitor)  # type: ignore[arg-type]
        self.limit = limit
        self.stop = asyncio.Event()

    async def _one(self, kind: FaultKind, duration: float, stop: asyncio.Event) -> None:
        self.faults.append(FaultRecord(kind.value, "-", time.time()))
        if len(self.faults) >= self.limit:
            stop.set()


async def test_every_enabled_fault_kind_is_injected_before_any_repeats() -> None:
    """Issue 25: `--faults ...,etcd-freeze` injected no etcd-freeze: kinds were drawn with
    replacement, so a seeded run could leave one out. Each kind now comes once per cycle."""
    kinds = parse_faults("sweeper-kill,s3-storm,publisher-kill,writer-freeze,etcd-freeze")
    for seed in range(40):
        config = ChaosConfig(seed=seed, faults=kinds, gap_s=(0.0, 0.0))
        nemesis = _RecordingNemesis(config, limit=len(kinds))
        await nemesis.run(time.time() + 3600, nemesis.stop)
        assert {record.kind for record in nemesis.faults} == {k.value for k in kinds}, seed
        assert nemesis.not_injected() == []
    short = _RecordingNemesis(ChaosConfig(seed=1, faults=kinds, gap_s=(0.0, 0.0)), limit=2)
    await short.run(time.time() + 3600, short.stop)
    assert len(short.not_injected()) == 3
    report = ChaosReport(faults_not_injected=short.not_injected())
    assert "not injected (run too short): " in text_report(report)
