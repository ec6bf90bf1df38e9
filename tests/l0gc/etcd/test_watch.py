"""`EtcdWatch` read to a point, against a scripted gRPC stream: which revision a sync
vouches for on a server whose progress answers can overtake its events (etcd before
3.5.13) and on one that orders them, and the server versions told apart."""

from __future__ import annotations

from collections.abc import Iterable

import grpc.aio
import pytest
from aetcd import rpc

from l0gc.contract.kv import Change
from l0gc.errors import WatchLost
from l0gc.etcd.watch import EtcdWatch, progress_is_ordered


class ScriptedCall:
    """A Watch call whose answers are given in advance; records what was written."""

    def __init__(self, answers: Iterable[rpc.WatchResponse]) -> None:
        self.answers = list(answers)
        self.written: list[rpc.WatchRequest] = []
        self.cancelled = False

    async def write(self, request: rpc.WatchRequest) -> None:
        self.written.append(request)

    async def read(self) -> rpc.WatchResponse | object:
        return self.answers.pop(0) if self.answers else grpc.aio.EOF

    def cancel(self) -> None:
        self.cancelled = True


def events(revision: int, *keys: str, delete: bool = False) -> rpc.WatchResponse:
    kind = rpc.Event.EventType.DELETE if delete else rpc.Event.EventType.PUT
    return rpc.WatchResponse(
        header=rpc.ResponseHeader(revision=revision),
        events=[
            rpc.Event(type=kind, kv=rpc.KeyValue(key=k.encode(), value=b"v", mod_revision=revision))
            for k in keys
        ],
    )


def progress(revision: int) -> rpc.WatchResponse:
    return rpc.WatchResponse(header=rpc.ResponseHeader(revision=revision), watch_id=-1)


def created(revision: int) -> rpc.WatchResponse:
    return rpc.WatchResponse(header=rpc.ResponseHeader(revision=revision), created=True)


def watch(call: ScriptedCall, *, ordered: bool, start: int = 11) -> EtcdWatch:
    return EtcdWatch(
        "127.0.0.1:1", "/ns/", call, 5.0, start_revision=start, ordered_progress=ordered
    )


async def test_an_unordered_progress_answer_vouches_only_for_the_events_delivered() -> None:
    """etcd 3.5.1 answers 20 before replaying the change at 12 to a watch made from 11:
    the sync vouches for 10 (the watch's start), not 20; the next, for the change's 12."""
    call = ScriptedCall([created(20), progress(20), events(12, "/ns/a"), progress(20)])
    unordered = watch(call, ordered=False)
    assert await unordered.sync() == ([], 10)
    assert unordered.answered == 20  # what a check may try first (`l0gc.etcd.follow`)
    changes, revision = await unordered.sync()
    assert (changes, revision) == ([Change("/ns/a", b"v", 12)], 12)
    assert all(r.HasField("progress_request") for r in call.written)


async def test_an_ordered_progress_answer_vouches_for_its_revision() -> None:
    call = ScriptedCall([created(20), progress(20), events(21, "/ns/a", "/ns/b"), progress(25)])
    ordered = watch(call, ordered=True)
    assert await ordered.sync() == ([], 20)
    changes, revision = await ordered.sync()
    assert [c.key for c in changes] == ["/ns/a", "/ns/b"]
    assert revision == 25


async def test_a_delete_is_a_change_without_a_value() -> None:
    call = ScriptedCall([events(13, "/ns/a", delete=True), progress(13)])
    assert await watch(call, ordered=False).sync() == ([Change("/ns/a", None, 13)], 13)


@pytest.mark.parametrize("ordered", [False, True])
async def test_an_event_older_than_what_was_vouched_for_ends_the_watch(ordered: bool) -> None:
    """An event at or below a revision already vouched for (a server bug, e.g. etcd
    issue 15220 or a duplicated event) would make the index go back: the watch is
    lost, and the follower reads in full."""
    call = ScriptedCall([events(14, "/ns/a"), progress(20), events(14, "/ns/b"), progress(20)])
    lagging = watch(call, ordered=ordered)
    await lagging.sync()
    with pytest.raises(WatchLost, match="event at revision 14 came after the watch had vouched"):
        await lagging.sync()


@pytest.mark.parametrize(
    "answer",
    [
        rpc.WatchResponse(compact_revision=7),
        rpc.WatchResponse(canceled=True, cancel_reason="permission denied"),
    ],
)
async def test_a_compacted_or_cancelled_answer_ends_the_watch(answer: rpc.WatchResponse) -> None:
    with pytest.raises(WatchLost):
        await watch(ScriptedCall([answer]), ordered=True).sync()


async def test_the_end_of_the_stream_ends_the_watch() -> None:
    with pytest.raises(WatchLost, match="the stream ended"):
        await watch(ScriptedCall([]), ordered=True).sync()


@pytest.mark.parametrize(
    ("version", "ordered"),
    [
        ("3.5.1", False),
        ("3.5.12", False),
        ("3.4.23", False),
        ("3.4.99", False),
        ("3.5.13", True),
        ("3.5.21", True),
        ("3.6.0", True),
        ("3.10.2-rc.1", True),
        ("4.0.0", True),
        ("", False),
        ("unknown (PERMISSION_DENIED)", False),
        ("v3.6.0", False),
    ],
)
def test_the_server_versions_that_order_progress_answers(version: str, ordered: bool) -> None:
    assert progress_is_ordered(version) is ordered
