"""The clients' decisions without I/O: which publisher, which redirect, which retry."""

from __future__ import annotations

import pytest

from watermark.client.protocol import (
    ApiError,
    EpochInfo,
    Exchange,
    PublisherSet,
    RedirectRefused,
    Retry,
    Unreachable,
    action_of,
    partition_path,
)

A, B = "http://pub-a:8080", "http://pub-b:8080"
FAST = Retry(attempts=4, first_pause_s=0.1, max_pause_s=1.0)


def test_redirects_are_followed_only_inside_the_publisher_set() -> None:
    """Same scheme, host and port as a configured publisher: followed; anything else,
    including another port or scheme on the same host, is RedirectRefused (action stop)."""
    publishers = PublisherSet([A, B + "/"])
    assert publishers.follow("http://PUB-B:8080/v1/partitions/x/fence") == B
    for forged in (
        "http://attacker:29999/v1/x",
        "https://pub-b:8080/v1/x",
        "http://pub-b:8081/v1/x",
        "http://pub-b.evil:8080/",
        "/v1/relative",
        "",
    ):
        with pytest.raises(RedirectRefused) as refused:
            publishers.follow(forged)
        assert refused.value.action == "stop"
        assert "token was not sent" in str(refused.value)


def test_a_fleet_pattern_admits_the_replicas_stable_names_and_nothing_else() -> None:
    """With a fleet (the Helm chart's StatefulSet names), a redirect to any replica of the
    headless Service is followed at its own origin, and remembered as the owner; other
    namespaces, ports, schemes, deeper names and IPs are still RedirectRefused, and the
    message names the fleet."""
    service = "http://l0gc-publisher.l0gc.svc.cluster.local:8080"
    fleet = "http://*.l0gc-publisher-peers.l0gc.svc.cluster.local:8080"
    publishers = PublisherSet([service], fleet=fleet)
    owner = "http://l0gc-publisher-2.l0gc-publisher-peers.l0gc.svc.cluster.local:8080"
    assert publishers.follow(owner + "/v1/partitions/p%2F3/fence") == owner
    assert publishers.follow(owner.upper().replace("HTTP://", "http://")) == owner
    exchange = Exchange(publishers, FAST, partition="p/3")
    assert not exchange.answered(307, {"error": "moved"}, retry_after=None, location=owner + "/x")
    assert exchange.answered(200, {}, retry_after=None, location=None)
    assert publishers.candidates("p/3") == [owner, service]
    for forged in (
        "http://l0gc-publisher-2.l0gc-publisher-peers.other.svc.cluster.local:8080/x",
        "http://l0gc-publisher-2.l0gc-publisher-peers.l0gc.svc.cluster.local:8081/x",
        "https://l0gc-publisher-2.l0gc-publisher-peers.l0gc.svc.cluster.local:8080/x",
        "http://a.b.l0gc-publisher-peers.l0gc.svc.cluster.local:8080/x",
        "http://evil@l0gc-publisher-peers.l0gc.svc.cluster.local:8080/x",
        "http://10.244.1.7:8080/x",
    ):
        with pytest.raises(RedirectRefused) as refused:
            publishers.follow(forged)
        assert f"fleet {fleet}" in str(refused.value)
    ips = PublisherSet(["http://127.0.0.2:8080"], fleet="http://127.0.0.0/29:8080")
    assert ips.follow("http://127.0.0.4:8080/x") == "http://127.0.0.4:8080"
    with pytest.raises(RedirectRefused):
        ips.follow("http://127.0.0.9:8080/x")


def test_a_bad_fleet_pattern_is_refused_naming_it() -> None:
    """A client's fleet is checked when the client is made: a ValueError names the entry."""
    with pytest.raises(ValueError, match="the client's fleet entry 'ftp://x'"):
        PublisherSet([A], fleet="http://ok:1,ftp://x")


def test_a_partition_goes_to_its_known_owner_first() -> None:
    """After an answer from B (or a redirect to it), B is tried first for that partition."""
    publishers = PublisherSet([A, B])
    exchange = Exchange(publishers, FAST, partition="p")
    assert exchange.target == A
    assert not exchange.answered(307, {"error": "moved"}, retry_after=None, location=B + "/x")
    assert exchange.target == B
    assert exchange.answered(200, {}, retry_after=None, location=None)
    assert publishers.candidates("p") == [B, A]
    assert publishers.candidates("q") == [A, B]


def test_retry_codes_are_retried_with_backoff_and_the_rest_raise_with_their_action() -> None:
    """503 fence_timeout: retried (Retry-After wins over the backoff) until the attempts are
    spent; 409 stale_epoch raises at once with action reupload; 410 refence; 400 stop."""
    exchange = Exchange(PublisherSet([A]), FAST, partition="p")
    assert not exchange.answered(503, {"error": "fence_timeout"}, retry_after=None, location=None)
    assert exchange.pause_s == pytest.approx(0.1)
    assert not exchange.answered(503, {"error": "no_owner"}, retry_after="1", location=None)
    assert exchange.pause_s == pytest.approx(1.0)
    assert not exchange.answered(503, {"error": "fence_timeout"}, retry_after=None, location=None)
    with pytest.raises(ApiError) as spent:
        exchange.answered(
            503, {"error": "fence_timeout", "message": "m"}, retry_after=None, location=None
        )
    assert (spent.value.status, spent.value.code, spent.value.action) == (
        503,
        "fence_timeout",
        "retry",
    )
    for status, code, action in (
        (409, "stale_epoch", "reupload"),
        (410, "fence_expired", "refence"),
        (400, "bad_request", "stop"),
        (409, "already_committed", "stop"),
    ):
        with pytest.raises(ApiError) as raised:
            Exchange(PublisherSet([A]), FAST).answered(
                status, {"error": code}, retry_after=None, location=None
            )
        assert raised.value.action == action


def test_a_fence_that_may_have_arrived_is_not_retried_but_a_commit_is() -> None:
    """No answer after sending: a commit (idempotent) is retried, a fence raises
    Unreachable at once; a refused connection is retried for both, on the next publisher."""
    commit = Exchange(PublisherSet([A]), FAST, base=A)
    commit.failed("read timeout", sent=True)
    assert (commit.target, commit.attempt) == (A, 1)
    fence = Exchange(PublisherSet([A, B]), FAST, partition="p", idempotent=False)
    fence.failed("connection refused", sent=False)
    assert fence.target == B
    with pytest.raises(Unreachable):
        fence.failed("read timeout", sent=True)


def test_a_pinned_request_never_moves_to_another_publisher() -> None:
    """Commit and abort go where the fence was granted: a 307 there is not followed."""
    exchange = Exchange(PublisherSet([A, B]), FAST, base=B)
    with pytest.raises(ApiError) as raised:
        exchange.answered(307, {"error": "moved"}, retry_after=None, location=A + "/x")
    assert raised.value.action == "redirect"
    exchange = Exchange(PublisherSet([A, B]), FAST, base=B)
    exchange.failed("refused", sent=False)
    assert exchange.target == B


def test_actions_come_from_the_one_error_table() -> None:
    """Known codes: the table's action; unknown ones by status."""
    assert action_of(503, "etcd_unavailable") == "retry"
    assert action_of(404, "unknown_fence") == "refence"
    assert action_of(502, "") == "retry"
    assert action_of(418, "teapot") == "stop"


def test_the_epoch_answer_stamps_max_of_epoch_and_created_epochs() -> None:
    """EpochInfo.stamp = max(epoch, created_epoch of each partition)."""
    info = EpochInfo.of(
        {
            "version": 1,
            "epoch": 7,
            "partitions": [
                {"partition": "a", "created_epoch": 9, "window": [9, 9]},
                {"partition": "b", "created_epoch": 2, "window": [5, 7]},
            ],
        }
    )
    assert info.stamp(["b"]) == 7
    assert info.stamp(["a", "b"]) == 9
    assert partition_path("orders/0", "/fence") == "/v1/partitions/orders%2F0/fence"


def test_a_publisher_url_must_be_http() -> None:
    """A URL that is not http(s)://HOST is refused, naming it."""
    with pytest.raises(ValueError, match="ftp://x"):
        PublisherSet(["ftp://x"])
    with pytest.raises(ValueError, match="at least one"):
        PublisherSet([])
