"""The in-memory object store behaves like S3 for listing and deleting, and injects faults."""

from __future__ import annotations

import pytest

from gcd.storage.objectstore import KeyFailure
from l0gc.errors import StorageError
from l0lab.testing.memory import MemoryObjectStore


def make_store(keys: list[str]) -> MemoryObjectStore:
    store = MemoryObjectStore()
    for index, key in enumerate(keys):
        store.put(key, size=index, last_modified_s=float(index))
    return store


async def test_list_pages_in_key_order_under_prefix() -> None:
    """Pages are sorted, limited to the prefix, and chained by continuation tokens."""
    store = make_store([f"r/{i:03d}" for i in range(25)] + ["q/1", "s/1"])
    first = await store.list_page("r/", max_keys=10)
    assert [o.key for o in first.objects] == [f"r/{i:03d}" for i in range(10)]
    assert first.next_token is not None
    keys = [o.key for o in first.objects]
    token = first.next_token
    while token is not None:
        page = await store.list_page("r/", continuation_token=token, max_keys=10)
        keys += [o.key for o in page.objects]
        token = page.next_token
    assert keys == sorted(f"r/{i:03d}" for i in range(25))
    assert store.list_requests == 3


async def test_start_after_skips_keys_at_or_before_it() -> None:
    """StartAfter returns only keys strictly after it, still under the prefix."""
    store = make_store(["r/417/a", "r/417/b", "r/4170", "r/418/a", "r/5"])
    page = await store.list_page("r/4", start_after="r/4170")
    assert [o.key for o in page.objects] == ["r/418/a"]
    assert page.next_token is None


async def test_delete_reports_deleted_and_failed_keys() -> None:
    """Deleting removes keys (missing ones count as deleted); injected keys fail with their code."""
    store = make_store(["a", "b", "c"])
    store.key_faults["b"] = "AccessDenied"
    result = await store.delete_batch(["a", "b", "missing"])
    assert result.deleted == ("a", "missing")
    assert result.errors == (KeyFailure("b", "AccessDenied", "injected AccessDenied"),)
    assert not result.errors[0].retryable
    assert store.keys() == {"b", "c"}
    assert store.delete_requests == 1


async def test_key_fault_budget_expires() -> None:
    """A key fault with a budget fails that many times, then the key deletes."""
    store = make_store(["a"])
    store.key_faults["a"] = "InternalError"
    store.key_fault_budget["a"] = 2
    for _ in range(2):
        result = await store.delete_batch(["a"])
        assert result.errors[0].retryable
    assert (await store.delete_batch(["a"])).deleted == ("a",)


async def test_request_faults_raise_storage_errors() -> None:
    """Injected whole-request faults raise StorageError with code and retryable flag."""
    store = make_store(["a"])
    store.fail_requests("list", "SlowDown", times=1)
    with pytest.raises(StorageError) as caught:
        await store.list_page("")
    assert caught.value.code == "SlowDown"
    assert caught.value.retryable
    assert (await store.list_page("")).objects[0].key == "a"
    store.fail_requests("delete", "AccessDenied", times=1)
    with pytest.raises(StorageError) as denied:
        await store.delete_batch(["a"])
    assert not denied.value.retryable


async def test_seeded_fault_share_is_reproducible() -> None:
    """The same seed fails the same requests."""
    outcomes = []
    for _ in range(2):
        store = make_store(["a"])
        store.fail_share(0.5, ["SlowDown", "500"], seed=7)
        run = []
        for _ in range(20):
            try:
                await store.list_page("")
                run.append("ok")
            except StorageError as exc:
                run.append(exc.code)
        outcomes.append(run)
    assert outcomes[0] == outcomes[1]
    assert "ok" in outcomes[0]
    assert {"SlowDown", "500"} & set(outcomes[0])


async def test_batch_size_is_limited_to_1000() -> None:
    """DeleteObjects refuses an empty batch or more than 1000 keys, like S3."""
    store = make_store([])
    with pytest.raises(StorageError):
        await store.delete_batch([])
    with pytest.raises(StorageError):
        await store.delete_batch([str(i) for i in range(1001)])
