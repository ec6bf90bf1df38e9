"""`gcd status` without `--all` folds the read page by page (`PinningFold`): the same
report as the whole read, whatever the pages, the order of names or a restarted read."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gcd.status.report import PinningFold, build_report, report_from_fold
from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import References
from l0gc.contract.safe_epoch import GcView
from l0gc.etcd.memory import MemoryKV
from l0gc.etcd.store import WatermarkStore

NOW = 1_763_700_000.0
NAMESPACE = "/l0gc/fold"


def _records(watermarks: list[int | None]) -> dict[str, bytes]:
    """orders/0.. with the given M(p) (None: a malformed record); names sort differently
    as strings (orders/10 < orders/2) than as people count them."""
    out = {}
    for n, watermark in enumerate(watermarks):
        name = f"orders/{n}"
        out[name] = (
            b'{"partition": 1'
            if watermark is None
            else PartitionRecord(
                name, watermark, 1, owner=f"pub-{n % 3}", owner_epoch=1, updated_at=NOW - n
            ).encode()
        )
    return out


def _fold(view: GcView, cuts: list[int], restart_after: int | None) -> PinningFold:
    store = WatermarkStore(MemoryKV(), NAMESPACE)
    items = sorted(
        [(store.epoch_key, view.cluster_epoch_raw or b"")]
        + [(store.partitions_prefix + n, raw) for n, raw in view.partitions.items()]
    )
    fold = PinningFold(store)
    bounds = sorted({0, len(items), *(c % (len(items) + 1) for c in cuts)})
    pages = [items[a:b] for a, b in itertools.pairwise(bounds)]
    fold.start(view.revision, 0)
    for number, page in enumerate(pages):
        if number == restart_after:  # a read that starts again keeps nothing of the first
            fold.start(view.revision, 0)
            for again in pages[:number]:
                fold.add(iter(again))
        fold.add(iter(page))
        assert len(fold.kept) <= 20  # never more than 2 x the pinning shown
    return fold


@settings(max_examples=300, deadline=None)
@given(
    watermarks=st.lists(st.one_of(st.none(), st.integers(-1, 6)), max_size=40).filter(
        lambda w: w.count(None) <= 2
    ),
    epoch=st.integers(0, 9),
    cuts=st.lists(st.integers(0, 60), max_size=6),
    restart_after=st.one_of(st.none(), st.integers(1, 3)),
)
def test_the_fold_reports_what_the_whole_read_reports(
    watermarks: list[int | None], epoch: int, cuts: list[int], restart_after: int | None
) -> None:
    view = GcView(9, str(epoch).encode(), _records(watermarks))
    fold = _fold(view, cuts, restart_after)
    whole = build_report(view, NAMESPACE, NOW).to_dict()
    folded = report_from_fold(fold, NAMESPACE, NOW).to_dict()
    assert folded == whole


def test_a_thousand_partitions_at_one_m_keep_only_the_first_ten_by_count_order() -> None:
    """Every partition pins M: the fold holds at most 20 raw records at any time, and
    shows orders/0..9 (not orders/0, 1, 10, 100, ... as names sort)."""
    view = GcView(9, b"8", _records([3] * 1000))
    fold = _fold(view, list(range(0, 1001, 7)), None)
    report = report_from_fold(fold, NAMESPACE, NOW)
    assert [p.partition for p in report.pinning] == [f"orders/{n}" for n in range(10)]
    assert report.partition_count == 1000
    assert report.to_dict() == build_report(view, NAMESPACE, NOW).to_dict()


def test_the_report_counts_the_partitions_that_send_references_both_ways() -> None:
    """Full read and fold alike: how many partitions' writers send references, and the
    keys held (one record sends two keys, one sends none yet, one never did)."""
    records = _records([3, 4, 5])
    refs = (References(((7, ("l0/a", "l0/b")),)), References(()), None)
    for n, held in enumerate(refs):
        records[f"orders/{n}"] = PartitionRecord(
            f"orders/{n}", 3 + n, 1, owner="p", owner_epoch=1, updated_at=NOW, references=held
        ).encode()
    view = GcView(revision=9, cluster_epoch_raw=b"10", partitions=records)
    full = build_report(view, NAMESPACE, NOW)
    assert full.references == {"partitions": 2, "keys": 2}
    assert report_from_fold(_fold(view, [2], None), NAMESPACE, NOW).references == full.references
