"""Global M from one view of the namespace: the rails of `l0gc.contract.safe_epoch`, each
at the boundary where a bug would let an object be deleted too early."""

from __future__ import annotations

import pytest

from l0gc.contract.record import PartitionRecord
from l0gc.contract.references import Reference, References
from l0gc.contract.safe_epoch import (
    PINNING_LIMIT,
    GcView,
    PartitionSummary,
    SafeEpoch,
    cluster_id_text,
    compute_safe_epoch,
    parse_cluster_epoch,
    summarize,
)
from l0gc.errors import InvalidRecord


def record(partition: str, watermark: int) -> bytes:
    """An encoded, well-formed record of `partition` at M(p) = `watermark`."""
    return PartitionRecord(partition, watermark, 1, owner="pub-a", owner_epoch=1).encode()


def view(epoch: bytes | None, **watermarks: int) -> GcView:
    """A view at revision 7 with cluster epoch `epoch` and one record per keyword."""
    return GcView(7, epoch, {name: record(name, m) for name, m in watermarks.items()})


@pytest.mark.parametrize(
    ("raw", "value"),
    [(b"0", 0), (b"7", 7), (b"70", 70), (b"100", 100), (str(2**63 - 1).encode(), 2**63 - 1)],
)
def test_a_cluster_epoch_is_a_plain_decimal_up_to_int64_max(raw: bytes, value: int) -> None:
    """ "0", "7", "70" and 2**63-1 decode exactly."""
    assert parse_cluster_epoch(raw) == value


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"07", "not a non-negative decimal"),
        (b"00", "not a non-negative decimal"),
        (b"-0", "not a non-negative decimal"),
        (b"-1", "not a non-negative decimal"),
        (b"", "not a non-negative decimal"),
        (b" 7", "not a non-negative decimal"),
        ("\u0667".encode(), "not a non-negative decimal"),  # an Arabic-Indic seven
        (str(2**63).encode(), "overflows int64"),
        (str(2**64).encode(), "overflows int64"),
    ],
)
def test_a_cluster_epoch_with_a_leading_zero_a_sign_or_past_int64_is_refused(
    raw: bytes, says: str
) -> None:
    """ "07" is not what `watermark epoch advance` writes (7 is "7"); 2**63 is no int64:
    both are refused naming the value, never read as some other epoch."""
    with pytest.raises(InvalidRecord, match=says) as caught:
        parse_cluster_epoch(raw)
    assert repr(raw.decode("ascii", errors="replace")) in str(caught.value)


def test_a_missing_cluster_epoch_says_how_to_create_it() -> None:
    """No `{ns}/epoch` key: the error names the command that writes it."""
    with pytest.raises(InvalidRecord, match="watermark epoch advance"):
        parse_cluster_epoch(None)


def test_m_of_p_equal_to_the_cluster_epoch_blocks() -> None:
    """The rail at its boundary: M(p) == the cluster epoch (objects of the epoch still
    being written would be eligible) blocks, naming the partition; one below does not."""
    equal = compute_safe_epoch(view(b"5", a=2, b=5))
    assert (equal.defined, equal.safe_epoch, equal.cluster_epoch) == (False, None, 5)
    assert equal.blocked_partition == "b"
    assert "M(p) = 5, at or above the cluster epoch 5" in str(equal.blocked_reason)
    below = compute_safe_epoch(view(b"5", a=2, b=4))
    assert (below.defined, below.safe_epoch, below.blocked_reason) == (True, 2, None)


def test_without_partitions_m_is_the_cluster_epoch_minus_one() -> None:
    """No partition: M = cluster epoch - 1 (what deleted partitions stranded is collected),
    pinned by nobody."""
    safe = compute_safe_epoch(view(b"9"))
    assert (safe.defined, safe.safe_epoch, safe.partition_count, safe.pinning) == (True, 8, 0, ())
    assert compute_safe_epoch(view(b"0")).safe_epoch == -1


def test_m_is_the_lowest_m_of_p_and_names_its_partitions() -> None:
    """M = min M(p) below the cluster epoch - 1; pinning holds the records at the minimum."""
    safe = compute_safe_epoch(view(b"10", a=3, b=6, c=3))
    assert (safe.safe_epoch, safe.cluster_epoch, safe.revision) == (3, 10, 7)
    assert [(r.partition, r.watermark) for r in safe.pinning] == [("a", 3), ("c", 3)]


def test_pinning_lists_at_most_the_limit() -> None:
    """Eleven partitions at the minimum: the ten lowest names pin."""
    partitions = {f"p{i:02d}": 4 for i in range(PINNING_LIMIT + 1)}
    safe = compute_safe_epoch(view(b"20", **partitions))
    assert PINNING_LIMIT == 10
    assert [r.partition for r in safe.pinning] == [f"p{i:02d}" for i in range(10)]


def test_a_blocked_view_keeps_what_it_read() -> None:
    """A malformed record blocks with its name, reason, the epoch and the pause marker."""
    raw = {"a": record("a", 1), "b": b"{}"}
    safe = compute_safe_epoch(GcView(3, b"9", raw, paused=True, paused_reason="ops"))
    assert isinstance(safe, SafeEpoch)
    assert (safe.defined, safe.blocked_partition, safe.cluster_epoch) == (False, "b", 9)
    assert str(safe.blocked_reason).startswith("malformed partition record: ")
    assert (safe.revision, safe.partition_count, safe.paused, safe.paused_reason) == (
        3,
        2,
        True,
        "ops",
    )


def test_defined_is_true_exactly_when_m_is_known() -> None:
    """`defined` follows safe_epoch (M = 0 is defined; None is not); paused defaults off."""
    known = SafeEpoch(revision=1, cluster_epoch=1, safe_epoch=0, partition_count=0)
    unknown = SafeEpoch(revision=1, cluster_epoch=None, safe_epoch=None, partition_count=0)
    assert (known.defined, unknown.defined) == (True, False)
    assert (known.paused, known.refused_reason) == (False, None)
    assert compute_safe_epoch(view(b"3")).paused is False
    assert GcView(1, b"3", {}).paused is False


def test_a_cluster_id_is_16_hex_digits_and_0_means_the_client_cannot_tell() -> None:
    """etcd's cluster id as a view shows it: 0 (no id in the response) is None, so no
    binding is compared against a made-up cluster; every other id is 16 hex digits."""
    assert cluster_id_text(0) is None
    assert cluster_id_text(1) == "0000000000000001"
    assert cluster_id_text(0xABC) == "0000000000000abc"
    assert cluster_id_text(2**64 - 1) == "ffffffffffffffff"


def test_references_are_read_with_m_and_merged_over_the_partitions() -> None:
    """Every record's references, merged (the first reference to a key wins, partitions
    in name order); a record whose writer never sent any counts for nothing, an empty
    one counts as a partition that sends them."""
    raws = {
        "a": PartitionRecord("a", 5, 1, references=References(((3, ("k1", "k2")),))).encode(),
        "b": PartitionRecord("b", 6, 1, references=References(((9, ("k2",)),))).encode(),
        "c": PartitionRecord("c", 7, 1, references=References(())).encode(),
        "d": record("d", 8),
    }
    read = compute_safe_epoch(GcView(revision=4, cluster_epoch_raw=b"10", partitions=raws))
    assert read.safe_epoch == 5
    assert read.referencing == 3
    assert read.references == {"k1": Reference("a", 3, "k1"), "k2": Reference("a", 3, "k2")}
    summary = summarize(raws)
    assert (summary.referencing, len(summary.references)) == (3, 2)
    none = compute_safe_epoch(view(b"10", d=8))
    assert (none.referencing, none.references) == (0, {})


def test_without_a_read_of_references_there_are_none() -> None:
    """The defaults: a summary built from a count alone, and a blocked read."""
    assert (PartitionSummary(3).referencing, PartitionSummary(3).references) == (0, {})
    blocked = compute_safe_epoch(GcView(revision=1, cluster_epoch_raw=None, partitions={}))
    assert blocked.safe_epoch is None
    assert (blocked.referencing, blocked.references) == (0, {})
