"""The binding rules (pure): which namespace may sweep which bucket and root."""

from __future__ import annotations

import pytest

from watermark.core.binding import Binding, Claim, StorageTarget, check_binding, claim_key
from watermark.errors import InvalidRecord

NS = "/l0gc/a"
TARGET = StorageTarget("bucket-a", "level_zero/data", "http://127.0.0.1:9000/")
BINDING = Binding(NS, TARGET, "b1", "c1", 1.0)


def test_encode_decode_round_trip_and_endpoint_normalised() -> None:
    """Binding and claim decode to what was encoded; endpoints compare without case or '/'."""
    assert Binding.decode(BINDING.encode()) == BINDING
    assert Claim.decode(BINDING.claim().encode()) == BINDING.claim()
    assert StorageTarget("bucket-a", "level_zero/data", "HTTP://127.0.0.1:9000") == TARGET
    assert claim_key("r/x") == "r/x/.l0gc-claim.json"


@pytest.mark.parametrize(
    "raw",
    [b"", b"[]", b'{"version": 1.0}', b'{"version": true}', b"[" * 100_000,
     b'{"version":1,"namespace":"/a","namespace":"/b"}', b'{"version":1,"bound_at":NaN}'],
)  # fmt: skip
def test_hostile_bindings_are_refused_not_crashing(raw: bytes) -> None:
    """Bad bytes raise InvalidRecord (never RecursionError or anything else)."""
    with pytest.raises(InvalidRecord):
        Binding.decode(raw)
    assert "unreadable binding" in str(check_binding(NS, raw, None, TARGET, None))


def test_bound_consistent_target_may_delete() -> None:
    """Bound here, same cluster, claim naming this binding: no refusal."""
    claim = BINDING.claim().encode()
    assert check_binding(NS, BINDING.encode(), "c1", TARGET, claim) is None
    assert check_binding(NS, BINDING.encode(), None, TARGET, claim) is None  # id unknown


def test_every_mismatch_is_refused_naming_both_sides() -> None:
    """Unbound, other target, other etcd cluster, no claim, another namespace's claim."""
    claim = BINDING.claim().encode()
    unbound = check_binding(NS, None, "c1", TARGET, claim)
    assert unbound is not None
    assert "not bound" in unbound
    assert "bucket-a" in unbound
    other = StorageTarget("bucket-b", "level_zero/data", "http://127.0.0.1:9000")
    moved = check_binding(NS, BINDING.encode(), "c1", other, claim)
    assert moved is not None
    assert "s3://bucket-a/" in moved
    assert "s3://bucket-b/" in moved
    root = StorageTarget("bucket-a", "level_zero/other", "http://127.0.0.1:9000")
    assert check_binding(NS, BINDING.encode(), "c1", root, claim) is not None
    restored = check_binding(NS, BINDING.encode(), "c2", TARGET, claim)
    assert restored is not None
    assert "c1" in restored
    assert "c2" in restored
    missing = check_binding(NS, BINDING.encode(), "c1", TARGET, None)
    assert missing is not None
    assert "no claim" in missing
    theirs = Claim("/l0gc/b", "b9", "c9", "bucket-a", "level_zero/data", 2.0).encode()
    stolen = check_binding(NS, BINDING.encode(), "c1", TARGET, theirs)
    assert stolen is not None
    assert "/l0gc/b" in stolen
    assert NS in stolen
    copied = check_binding("/l0gc/z", BINDING.encode(), "c1", TARGET, claim)
    assert copied is not None
    assert "copied" in copied
    assert "unreadable claim" in str(check_binding(NS, BINDING.encode(), "c1", TARGET, b"{"))



def test_an_unbound_refusal_names_the_bind_command_of_its_own_storage() -> None:
    """S3: bucket, root and endpoint flags; Azure: account URL and container (the command
    itself runs in tests/gcd/cli/test_azure_cli.py)."""
    azure = StorageTarget("l0gc", "level_zero/data", "https://acct.blob.core.windows.net",
                          kind="azure")  # fmt: skip
    expected = {
        TARGET: "watermark namespace bind --bucket bucket-a --root level_zero/data "
                "--endpoint-url http://127.0.0.1:9000",
        StorageTarget("bucket-a", "r"): "watermark namespace bind --bucket bucket-a --root r",
        azure: "watermark namespace bind --storage azure --account-url "
               "https://acct.blob.core.windows.net --container l0gc --root level_zero/data",
    }  # fmt: skip
    for target, command in expected.items():
        assert f"`{command}`" in str(check_binding(NS, None, "c1", target, None))
