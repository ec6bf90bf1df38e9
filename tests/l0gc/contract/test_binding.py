"""The binding rules (pure): which namespace may sweep which bucket and root."""

from __future__ import annotations

from itertools import islice

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l0gc.contract.binding import (
    CLAIM_NAME,
    Binding,
    Claim,
    StorageTarget,
    ancestor_roots,
    any_may_precede_claim,
    check_ancestor_claims,
    check_binding,
    claim_key,
    claimed_root,
    covering_root,
    directories_below,
    may_precede_claim,
    nested_root,
    overlap_conflict,
)
from l0gc.errors import InvalidRecord

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
    [
        b"",
        b"[]",
        b'{"version": 1.0}',
        b'{"version": true}',
        b"[" * 100_000,
        b'{"version":1,"namespace":"/a","namespace":"/b"}',
        b'{"version":1,"bound_at":NaN}',
    ],
)
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
    itself runs in tests/gcd/cli/test_storage_azure.py)."""
    azure = StorageTarget(
        "l0gc", "level_zero/data", "https://acct.blob.core.windows.net", kind="azure"
    )
    expected = {
        TARGET: "watermark namespace bind --bucket bucket-a --root level_zero/data "
        "--endpoint-url http://127.0.0.1:9000",
        StorageTarget("bucket-a", "r"): "watermark namespace bind --bucket bucket-a --root r",
        azure: "watermark namespace bind --storage azure --account-url "
        "https://acct.blob.core.windows.net --container l0gc --root level_zero/data",
        StorageTarget("g", "r", kind="gcs"): "watermark namespace bind --storage gcs --bucket g "
        "--root r",
        StorageTarget(
            "g", "r", "http://127.0.0.1:4443", kind="gcs"
        ): "watermark namespace bind --storage gcs --bucket g --root r "
        "--endpoint-url http://127.0.0.1:4443",
    }
    for target, command in expected.items():
        assert f"`{command}`" in str(check_binding(NS, None, "c1", target, None))


# Roots never nest (issue 25, finding 1; docs/operations.md "Roots never nest").
OUTER, INNER = "level_zero/data", "level_zero/data/417"


def test_directories_below_the_root_outermost_first() -> None:
    """Every directory between the root and the key, the root itself excluded; one-letter
    and empty segments counted. First of the nesting tests: the others search with it, and a
    loop that never ends is caught here, at five directories."""
    assert list(islice(directories_below(f"{INNER}/000/k", OUTER), 5)) == [INNER, f"{INNER}/000"]
    assert list(islice(directories_below(f"{OUTER}/k", OUTER), 5)) == []
    assert list(islice(directories_below(f"{OUTER}/4/5/k", OUTER), 5)) == [
        f"{OUTER}/4",
        f"{OUTER}/4/5",
    ]
    assert list(islice(directories_below(f"{OUTER}//k", OUTER), 5)) == [f"{OUTER}/"]
    assert list(islice(directories_below(f"{OUTER}/4//k", OUTER), 5)) == [
        f"{OUTER}/4",
        f"{OUTER}/4/",
    ]
    assert list(islice(directories_below("a/b/k", ""), 5)) == ["a", "a/b"]  # bucket top


def test_prefixes_nest_only_at_slashes() -> None:
    """The pure rules: ancestors up to the bucket top; `data2` is not below `data`."""
    assert ancestor_roots(INNER) == (OUTER, "level_zero", "")
    assert ancestor_roots("a") == ("",)
    assert claim_key("") == CLAIM_NAME
    assert nested_root(claim_key(INNER), OUTER) == INNER
    assert nested_root(claim_key("level_zero/data2"), OUTER) is None
    assert nested_root(claim_key(OUTER), OUTER) is None  # its own claim
    assert nested_root(f"{INNER}/x{CLAIM_NAME}", OUTER) is None  # not a claim object
    assert nested_root(f"{INNER}/k", OUTER) is None  # an ordinary key
    assert covering_root(f"{INNER}/1/k", OUTER, {INNER}) == INNER
    assert covering_root(f"{INNER}9/1/k", OUTER, {INNER}) is None
    assert list(may_precede_claim(f"{INNER}/000/-k", OUTER)) == [f"{INNER}/000"]
    assert list(may_precede_claim(f"{INNER}/000/k", OUTER)) == []


def test_a_claim_key_names_its_root_and_nothing_else_is_a_claim() -> None:
    """The bucket top's claim, claims one and three levels deep; near misses are None."""
    assert claimed_root(CLAIM_NAME) == ""
    assert claimed_root(f"a/{CLAIM_NAME}") == "a"
    assert claimed_root(claim_key(INNER)) == INNER
    assert claimed_root(f"{OUTER}/x{CLAIM_NAME}") is None  # no '/' before the name
    assert claimed_root(f"{claim_key(OUTER)}.bak") is None
    assert claimed_root(OUTER) is None


def test_the_covering_root_is_strictly_below_the_root_at_any_depth() -> None:
    """The nested root a key lies in, however deep; never the root itself, never a key
    equal to a nested root, empty path segments ('//') kept as they are."""
    deep = f"{INNER}/000000000000000002"
    assert covering_root(f"{deep}/k", OUTER, {deep}) == deep  # two directories down
    assert covering_root(f"{deep}/k", OUTER, {INNER, deep}) == INNER  # outermost first
    assert covering_root(f"{OUTER}/k", OUTER, {OUTER}) is None  # the root is not nested
    assert covering_root(INNER, OUTER, {INNER}) is None  # the key is no directory
    assert covering_root(f"{OUTER}/4/5/k", OUTER, {f"{OUTER}/4/5"}) == f"{OUTER}/4/5"
    assert covering_root(f"{OUTER}//k", OUTER, {f"{OUTER}/"}) == f"{OUTER}/"
    assert covering_root(f"{OUTER}/4//k", OUTER, {f"{OUTER}/4/"}) == f"{OUTER}/4/"
    assert covering_root(f"{deep}/k", OUTER, set()) is None
    assert covering_root(f"{deep}/k", OUTER, {f"{OUTER}/41"}) is None


def test_only_directories_whose_claim_sorts_after_the_key_may_precede_it() -> None:
    """A segment sorting before the claim name (a byte below '.', a prefix of the name)
    may come first in a listing; the claim object itself, digits and letters do not; the
    root's own claim is never asked about."""
    assert list(islice(may_precede_claim(f"{OUTER}/-x/-k", OUTER), 5)) == [f"{OUTER}/-x"]
    assert list(islice(may_precede_claim(f"{OUTER}/-x/k", OUTER), 5)) == []  # not the root
    assert list(may_precede_claim(f"{INNER}/000/.l0gc", OUTER)) == [f"{INNER}/000"]
    assert list(may_precede_claim(claim_key(f"{INNER}/000"), OUTER)) == []  # the claim
    assert list(may_precede_claim(f"{INNER}/000/{CLAIM_NAME}x", OUTER)) == []
    assert list(islice(may_precede_claim(f"{OUTER}/4/5/-k", OUTER), 5)) == [f"{OUTER}/4/5"]
    assert list(islice(may_precede_claim(f"{OUTER}//-k", OUTER), 5)) == [f"{OUTER}/"]
    assert list(islice(may_precede_claim(f"{OUTER}/4//-k", OUTER), 5)) == [f"{OUTER}/4/"]
    assert list(islice(may_precede_claim(f"{INNER}/-a/-b/k", OUTER), 5)) == [INNER, f"{INNER}/-a"]


@settings(max_examples=500)
@given(st.lists(st.sampled_from([*"/.-,+ 0aZ~\t\x01é", CLAIM_NAME, ".l0"]), max_size=20))
def test_the_quick_test_says_what_every_directory_comparison_says(parts: list[str]) -> None:
    """`may_precede_claim` skips keys in which no segment below the root starts below
    '/' (or is empty): it gives what comparing at every directory gives, for any key."""
    key = f"{OUTER}/{''.join(parts)}"
    compared = [
        d for d in directories_below(key, OUTER) if key[len(d) + 1 :].encode() < CLAIM_NAME.encode()
    ]
    assert list(may_precede_claim(key, OUTER)) == compared


@settings(max_examples=300)
@given(
    st.lists(
        st.lists(st.sampled_from([*"/.-,0aZ~\t\né", CLAIM_NAME]), max_size=8).map("".join),
        max_size=5,
    )
)
def test_a_page_may_precede_a_claim_when_any_of_its_keys_may(tails: list[str]) -> None:
    """`any_may_precede_claim` (one search of a page) says True whenever
    `may_precede_claim` yields for some key: it may say True more often, never less."""
    keys = [f"{OUTER}/{tail}" for tail in tails]
    if any(next(may_precede_claim(key, OUTER), None) is not None for key in keys):
        assert any_may_precede_claim(keys)


def test_a_page_of_plain_keys_cannot_precede_a_claim() -> None:
    """Examples: digits and letters never; one name below '.' in a page of many, yes."""
    plain = [f"{INNER}/000/{epoch:018d}/obj-{epoch}" for epoch in range(50)]
    assert not any_may_precede_claim(plain)
    assert not any_may_precede_claim([])
    assert any_may_precede_claim([*plain, f"{INNER}/000/{1:018d}/-k"])
    assert any_may_precede_claim([*plain, f"{INNER}/000/"])  # an empty last segment


def _claim(namespace: str, root: str, cluster: str = "c1") -> bytes:
    return Claim(namespace, "b2", cluster, "bucket-a", root, 2.0).encode()


def test_an_overlap_names_both_namespaces_roots_and_the_claim_in_both_orders() -> None:
    """Inside another root, or containing one; an unreadable claim is named as such."""
    inner = StorageTarget("bucket-a", INNER, "http://127.0.0.1:9000")
    inside = overlap_conflict("/l0gc/b", inner, OUTER, _claim(NS, OUTER), inside=True)
    assert inside.startswith(
        f"namespace /l0gc/b's root s3://bucket-a/{INNER} at http://127.0.0.1:9000 inside "
        f"s3://bucket-a/{OUTER} at http://127.0.0.1:9000, claimed by namespace '{NS}' "
        f"(binding b2, etcd cluster c1) ({claim_key(OUTER)}): "
    )
    assert "docs/operations.md#roots-never-nest" in inside
    contains = overlap_conflict(NS, TARGET, INNER, _claim("/l0gc/b", INNER), inside=False)
    assert (
        f"s3://bucket-a/{OUTER} at http://127.0.0.1:9000 contains s3://bucket-a/{INNER}" in contains
    )
    assert "claimed by namespace '/l0gc/b'" in contains
    assert f"({claim_key(INNER)})" in contains
    unreadable = overlap_conflict(NS, TARGET, INNER, b"{", inside=False)
    assert "claimed by an unreadable claim (" in unreadable


def test_an_ancestor_claim_blocks_unless_it_is_this_namespace_in_this_cluster() -> None:
    """Same namespace and etcd cluster (a `--replace` move): no conflict; another namespace,
    another cluster or an unreadable claim at any ancestor, the bucket top included, is."""
    inner = StorageTarget("bucket-a", INNER)
    assert check_ancestor_claims(NS, "c1", inner, {}) is None
    assert check_ancestor_claims(NS, "c1", inner, {INNER: _claim("/l0gc/b", INNER)}) is None
    assert check_ancestor_claims(NS, "c1", inner, {OUTER: _claim(NS, OUTER)}) is None
    assert check_ancestor_claims(NS, None, inner, {OUTER: _claim(NS, OUTER, "c9")}) is None
    for found in (
        {OUTER: _claim("/l0gc/b", OUTER)},
        {"": _claim("/l0gc/b", "")},
        {OUTER: _claim(NS, OUTER, "c9")},
        {"level_zero": b"{"},
    ):
        refused = check_ancestor_claims(NS, "c1", inner, found)
        (root,) = found
        assert refused is not None, found
        assert f"root s3://bucket-a/{INNER} inside s3://bucket-a/{root}," in refused
        assert f"({claim_key(root)})" in refused
    other = check_ancestor_claims(NS, None, inner, {OUTER: _claim("/l0gc/b", OUTER)})
    assert "claimed by namespace '/l0gc/b'" in str(other)
    nearest = {
        OUTER: _claim(NS, OUTER),
        "level_zero": _claim("/l0gc/c", "level_zero"),
        "": _claim("/l0gc/d", ""),
    }
    assert "namespace '/l0gc/c'" in str(check_ancestor_claims(NS, "c1", inner, nearest))
