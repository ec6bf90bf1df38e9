"""The lean path's failures mean what botocore's path makes of them.

A fault proxy (`l0lab.testing.faultproxy`) in front of the lean in-memory server answers
as S3 does when it throttles or fails (503 SlowDown, 500 InternalError, an error inside
a 200, a 301 redirect, a reset connection, DeleteObjects not implemented); each store
under test is armed first, with no faults, and compared with a store that never arms.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from gcd.rules.versions import version_target
from gcd.storage.s3.client import S3ObjectStore
from gcd.storage.s3.settings import S3Settings
from l0gc.errors import StorageError
from l0lab.testing.faultproxy import FaultConfig, FaultProxy
from l0lab.testing.lean_s3 import LeanS3

pytestmark = pytest.mark.integration


def _not_armed(store: S3ObjectStore) -> bool:
    """Whether botocore sends every request (a call, which mypy does not narrow)."""
    return not store.lean_armed


_names = itertools.count()
_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
KEYS = ["f/a", "f/b", "f/c", "f/d"]


@pytest.fixture(scope="module")
def lean_server() -> Iterator[LeanS3]:
    """The lean in-memory server."""
    with LeanS3() as server:
        yield server


@pytest.fixture
async def proxy(lean_server: LeanS3) -> AsyncIterator[tuple[FaultProxy, str]]:
    """A fault proxy (no faults yet) in front of a fresh bucket holding `KEYS`."""
    bucket = f"l0gc-faults-{next(_names)}"
    lean_server.load(bucket, KEYS)
    async with FaultProxy(lean_server.endpoint_url) as running:
        yield running, bucket


Call = Callable[[S3ObjectStore], Awaitable[object]]
CALLS: dict[str, tuple[str, Call]] = {
    "list": ("list", lambda store: store.list_page("f/")),
    "delete": ("delete", lambda store: store.delete_batch(["f/a", "f/b"])),
}


async def _error_of(store: S3ObjectStore, call: Call) -> StorageError:
    with pytest.raises(StorageError) as caught:
        await call(store)
    return caught.value


async def _armed(settings: S3Settings, stack: Any) -> S3ObjectStore:
    store: S3ObjectStore = await stack.enter_async_context(S3ObjectStore.open(settings))
    await store.list_page("f/")
    assert store.lean_armed
    return store


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("code", ["SlowDown", "InternalError", "ServiceUnavailable"])
async def test_throttles_and_server_errors_are_botocores(
    proxy: tuple[FaultProxy, str], code: str, call: str
) -> None:
    """A 503 SlowDown / 500 InternalError on the lean path is a retryable StorageError with
    botocore's code; the lean path stays armed."""
    running, bucket = proxy
    settings = S3Settings(bucket, running.endpoint_url, "us-east-1")
    operation, make = CALLS[call]
    async with contextlib.AsyncExitStack() as stack:
        lean = await _armed(settings, stack)
        plain = await stack.enter_async_context(S3ObjectStore.open(settings, lean=False))
        running.reconfigure(
            FaultConfig(share=1.0, codes=(code,), operations=frozenset({operation}))
        )
        lean_error = await _error_of(lean, make)
        plain_error = await _error_of(plain, make)
        assert lean.lean_armed
    assert (lean_error.code, lean_error.retryable) == (plain_error.code, plain_error.retryable)
    assert (lean_error.code, lean_error.retryable) == (code, True)
    assert running.faults[code] == 2


@pytest.mark.parametrize("call", sorted(CALLS))
async def test_an_error_inside_a_200_is_a_retryable_500(
    proxy: tuple[FaultProxy, str], call: str
) -> None:
    """A 200 whose body is an <Error> document is an error with its code, retryable, on
    both paths (never read as an empty listing or a batch with nothing deleted)."""
    running, bucket = proxy
    settings = S3Settings(bucket, running.endpoint_url, "us-east-1")
    operation, make = CALLS[call]
    async with contextlib.AsyncExitStack() as stack:
        lean = await _armed(settings, stack)
        plain = await stack.enter_async_context(S3ObjectStore.open(settings, lean=False))
        running.reconfigure(FaultConfig(error_in_200=frozenset({operation})))
        lean_error = await _error_of(lean, make)
        plain_error = await _error_of(plain, make)
        assert lean.lean_armed
    assert (lean_error.code, lean_error.retryable) == (plain_error.code, plain_error.retryable)
    assert (lean_error.code, lean_error.retryable) == ("InternalError", True)


async def test_a_redirect_disarms_and_botocore_answers(proxy: tuple[FaultProxy, str]) -> None:
    """A 301 to a lean request disarms the lean path (logged once) and the call is made
    through botocore, whose error is the one raised; botocore carries on afterwards."""
    running, bucket = proxy
    settings = S3Settings(bucket, running.endpoint_url, "us-east-1")
    async with S3ObjectStore.open(settings) as store:
        await store.list_page("f/")
        assert store.lean_armed
        running.reconfigure(
            FaultConfig(share=1.0, codes=("PermanentRedirect",), operations=frozenset({"list"}))
        )
        with capture_logs() as logs:
            error = await _error_of(store, CALLS["list"][1])
            again = await _error_of(store, CALLS["list"][1])
        running.reconfigure(FaultConfig())
        page = await store.list_page("f/")
    assert _not_armed(store)
    assert running.faults["PermanentRedirect"] == 3  # lean, botocore, botocore
    assert (error.code, error.retryable) == (again.code, again.retryable)
    assert (error.code, error.retryable) == ("PermanentRedirect", False)
    assert [log["code"] for log in logs if log["event"] == "s3.lean_disarmed"] == [
        "PermanentRedirect"
    ]
    assert [o.key for o in page.objects] == KEYS


async def test_a_reset_connection_is_retryable_once_the_lean_path_was_answered(
    proxy: tuple[FaultProxy, str],
) -> None:
    """A reset before any lean answer was read disarms (botocore is asked, and fails as the
    network does); after one, it is a retryable ConnectionError and the path stays armed."""
    running, bucket = proxy
    settings = S3Settings(bucket, running.endpoint_url, "us-east-1")
    drop = FaultConfig(drop_share=1.0, operations=frozenset({"list"}))
    async with S3ObjectStore.open(settings) as fresh, S3ObjectStore.open(settings) as proven:
        await fresh.list_page("f/")
        await proven.list_page("f/")
        await proven.list_page("f/")  # one lean answer read
        running.reconfigure(drop)
        untrusted = await _error_of(fresh, CALLS["list"][1])
        trusted = await _error_of(proven, CALLS["list"][1])
        assert _not_armed(fresh)
        assert proven.lean_armed
    # fresh: lean then botocore; proven: lean (aiohttp sends an idempotent request once
    # more when a reused connection is reset, on both paths)
    assert running.faults["dropped"] >= 3
    assert (untrusted.code, untrusted.retryable) == ("ConnectionError", True)
    assert (trusted.code, trusted.retryable) == ("ConnectionError", True)


async def test_delete_objects_not_implemented_falls_back_to_single_deletes(
    proxy: tuple[FaultProxy, str], lean_server: LeanS3
) -> None:
    """DeleteObjects answered 501 NotImplemented on the lean path: single deletes, as
    today, once said and kept (the next batch sends no DeleteObjects); the lean path stays
    armed for listings."""
    running, bucket = proxy
    settings = S3Settings(bucket, running.endpoint_url, "us-east-1")
    async with S3ObjectStore.open(settings) as store:
        await store.list_page("f/")
        running.reconfigure(FaultConfig(batch_delete=False))
        with capture_logs() as logs:
            first = await store.delete_batch(["f/a", "f/b"])
            second = await store.delete_batch(["f/c"])
        page = await store.list_page("f/")
        assert store.lean_armed
    assert first.deleted == ("f/a", "f/b")
    assert second.deleted == ("f/c",)
    assert store.detected.batch_delete is False
    assert running.faults["NotImplemented"] == 1
    assert running.requests["delete"] == 1 + 3  # one refused batch, three single deletes
    assert [log["event"] for log in logs].count("s3.batch_delete_unsupported") == 1
    assert [o.key for o in page.objects] == ["f/d"]
    assert lean_server.count(bucket) == 1


def _result(*entries: str) -> bytes:
    return f'<DeleteResult xmlns="{_NS}">{"".join(entries)}</DeleteResult>'.encode()


async def test_an_unreadable_quiet_answer_is_asked_again_verbosely_on_the_lean_path(
    scripted: Callable[[list[bytes]], Awaitable[tuple[str, list[bytes]]]],
) -> None:
    """As on botocore's path (test_client_quiet): a quiet answer naming a key not sent
    sends the batch again verbose, and later batches stay verbose."""
    sent = [version_target("a//b", "v1"), version_target("c", "v2")]
    rewritten = "<Error><Key>a/b</Key><VersionId>v1</VersionId><Code>AccessDenied</Code></Error>"
    verbose = _result(
        "<Deleted><Key>c</Key><VersionId>v2</VersionId></Deleted>",
        "<Error><Key>a//b</Key><VersionId>v1</VersionId><Code>AccessDenied</Code></Error>",
    )
    endpoint, bodies = await scripted([_result(rewritten), verbose, verbose])
    async with S3ObjectStore.open(S3Settings("bkt", endpoint, "us-east-1")) as store:
        await store.list_page("")
        assert store.lean_armed
        result = await store.delete_batch(sent)
        again = await store.delete_batch(sent)
        assert store.lean_armed
    assert result == again
    assert result.deleted == (version_target("c", "v2"),)
    assert [(f.key, f.code) for f in result.errors] == [(sent[0], "AccessDenied")]
    assert [b"<Quiet>true</Quiet>" in body for body in bodies] == [True, False, False]
