"""The two writer clients cannot drift apart: both are built from the one route table
(`watermark.client.routes.ROUTES`), with the same methods, signatures and docs, and each
operation sends what the API expects (driven here by a fake that answers in memory)."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from watermark.client import aio, routes, sync
from watermark.client.aio import AsyncWriterClient
from watermark.client.protocol import ApiError, Granted, PublisherSet, Retry
from watermark.client.routes import ROUTES, Request, Target, drive_sync
from watermark.client.sync import WriterClient

LIFECYCLE = {"close"}  # plus the context-manager dunders: not routes


def public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    """The public methods a class defines itself."""
    return {
        name: member
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


def test_both_clients_expose_exactly_the_route_table() -> None:
    """Every route is a method of both clients, and neither has a public method more."""
    for cls in (WriterClient, AsyncWriterClient):
        assert set(public_methods(cls)) == set(ROUTES) | LIFECYCLE, cls.__name__


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_a_method_has_its_operations_signature_and_one_doc(name: str) -> None:
    """Same parameters (names, kinds, defaults, annotations) in both clients as in the
    operation (less its target), the same return type, the same docstring; the async
    one is a coroutine, the sync one is not."""
    operation = inspect.signature(ROUTES[name])
    expected = list(operation.parameters.values())[1:]
    returned = str(operation.return_annotation)
    assert returned.startswith("Operation[")
    assert returned.endswith("]")
    blocking, coroutine = getattr(WriterClient, name), getattr(AsyncWriterClient, name)
    for method in (blocking, coroutine):
        signature = inspect.signature(method)
        assert list(signature.parameters.values())[1:] == expected, method.__qualname__
        assert signature.return_annotation == returned[len("Operation[") : -1]
    assert inspect.iscoroutinefunction(coroutine)
    assert not inspect.iscoroutinefunction(blocking)
    assert blocking.__doc__ == coroutine.__doc__
    assert blocking.__doc__


@pytest.mark.parametrize("module", [sync, aio])
def test_each_method_only_drives_its_own_operation(module: Any) -> None:
    """A client method's body is its docstring and a call of `routes.<its name>` handed
    to `_drive`: no path, body or loop is written in a client."""
    tree = ast.parse(Path(module.__file__).read_text())
    methods = [
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in ROUTES
    ]
    assert sorted(m.name for m in methods) == sorted(ROUTES)
    for method in methods:
        called = {
            node.func.attr
            for node in ast.walk(method)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "routes"
        }
        assert called == {method.name}, method.name
        assert not any(
            isinstance(n, ast.For | ast.While | ast.JoinedStr) for n in ast.walk(method)
        ), method.name


class Answers:
    """Answers requests in memory, recording (method, target + path, body)."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, str, Any]] = []

    def __call__(self, request: Request) -> dict[str, Any]:
        self.sent.append((request.method, request.exchange.target + request.path, request.body))
        answer = self.answers.pop(0)
        request.exchange.answered(200, answer, retry_after=None, location=None)
        return answer


FENCE = {
    "token": "t1",
    "partition": "orders/0",
    "epoch": 7,
    "window": [None, None],
    "deadline": None,
    "expires_in_s": 30.0,
    "slid": False,
}


def test_operations_build_the_apis_requests() -> None:
    """Paths are percent-encoded, a commit goes to the publisher that granted the fence,
    optional fields are sent only when given, and batch answers become values."""
    to = Target(PublisherSet(["http://a:1", "http://b:2"]), Retry())
    answers = Answers(FENCE)
    granted = drive_sync(routes.fence(to, "orders/0", 7), answers)
    assert answers.sent == [("POST", "http://a:1/v1/partitions/orders%2F0/fence", {"epoch": 7})]
    assert (granted.token, granted.base) == ("t1", "http://a:1")
    moved = Granted("t2", "orders/1", 7, (None, None), None, None, False, "http://b:2")
    refused = {"status": 409, "error": "stale_epoch"}
    answers = Answers({"offset": 3}, {"results": [{"status": 200}]}, {"results": [refused]})
    drive_sync(routes.commit(to, moved, 3), answers)
    results = drive_sync(routes.commits(to, [(granted, 4), (moved, 5)]), answers)
    assert answers.sent == [
        ("POST", "http://b:2/v1/fences/t2/commit", {"offset": 3}),
        ("POST", "http://a:1/v1/commits", {"commits": [{"token": "t1", "offset": 4}]}),
        ("POST", "http://b:2/v1/commits", {"commits": [{"token": "t2", "offset": 5}]}),
    ]
    assert results[0] == {"status": 200}
    assert isinstance(results[1], ApiError)
    answers = Answers({"ok": True}, {"ok": True})
    drive_sync(routes.reconciled(to, "p q", 5), answers)
    drive_sync(routes.reconciled(to, "p q", 5, log_end_offset=9), answers)
    assert [body for _, _, body in answers.sent] == [
        {"offset": 5},
        {"offset": 5, "log_end_offset": 9},
    ]
    assert answers.sent[0][1] == "http://a:1/v1/partitions/p%20q/reconciled"


def test_a_log_end_sends_the_keys_of_its_entries_as_a_record_stores_them() -> None:
    """``log_references`` ({offset: keys}) goes as {"offsets", "keys"}, offsets rising and
    repeated per key; a lone string instead of a list is a ValueError, nothing sent."""
    to = Target(PublisherSet(["http://a:1"]), Retry())
    answers = Answers({})
    refs = {7: ["k/c"], 5: ("k/a", "k/b"), 6: []}
    drive_sync(routes.reconciled(to, "p", 4, log_end_offset=7, log_references=refs), answers)
    assert answers.sent[0][2] == {
        "offset": 4,
        "log_end_offset": 7,
        "log_references": {"offsets": [5, 5, 7], "keys": ["k/a", "k/b", "k/c"]},
    }
    with pytest.raises(ValueError, match=r"log_references\[5\] must be a list"):
        drive_sync(
            routes.reconciled(to, "p", 4, log_end_offset=7, log_references={5: "k"}), Answers()
        )


def test_objects_are_sent_only_when_named() -> None:
    """A commit, a batch entry and a report carry ``objects`` only when given (an empty
    list is sent: a report that lifted none of the keys); 2- and 3-tuples mix in one
    batch; a lone string is a ValueError before any request of the batch is sent."""
    to = Target(PublisherSet(["http://a:1"]), Retry())
    first = Granted("t1", "orders/0", 7, (None, None), None, None, False, "http://a:1")
    second = Granted("t2", "orders/1", 7, (None, None), None, None, False, "http://a:1")
    keys = ["level_zero/data/001/000000000000000007/a", "level_zero/data/002/000000000000000007/b"]
    answers = Answers(
        {}, {}, {"results": [{"status": 200}] * 3}, {}, {"results": [{"status": 200}]}, {}
    )
    drive_sync(routes.commit(to, first, 3, keys), answers)
    drive_sync(routes.commit(to, first, 3), answers)
    drive_sync(
        routes.commits(to, [(first, 4, iter(keys[:1])), (second, 5), (second, 6, None)]), answers
    )
    drive_sync(routes.reconciled(to, "orders/0", 4, objects=keys[1:]), answers)
    drive_sync(routes.commits(to, [(first, 8)], iter(keys)), answers)  # the batch's objects
    drive_sync(routes.reconciled(to, "orders/0", 4, log_end_offset=9, objects=[]), answers)
    assert [body for _, _, body in answers.sent] == [
        {"offset": 3, "objects": keys},
        {"offset": 3},
        {
            "commits": [
                {"token": "t1", "offset": 4, "objects": keys[:1]},
                {"token": "t2", "offset": 5},
                {"token": "t2", "offset": 6},
            ]
        },
        {"offset": 4, "objects": keys[1:]},
        {"commits": [{"token": "t1", "offset": 8}], "objects": keys},
        {"offset": 4, "log_end_offset": 9, "objects": []},
    ]
    elsewhere = Granted("t3", "orders/2", 7, (None, None), None, None, False, "http://b:2")
    answers = Answers()
    with pytest.raises(ValueError, match="wrap a single key in a list"):
        drive_sync(routes.commits(to, [(first, 7, keys), (elsewhere, 1, keys[0])]), answers)
    with pytest.raises(ValueError, match="got the string"):
        drive_sync(routes.commit(to, first, 7, keys[0]), answers)
    assert answers.sent == []
