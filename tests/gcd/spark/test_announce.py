"""One deleting Spark job per namespace (`gcd.spark.announce`), on the in-memory etcd:
a second job is refused naming the first, the key goes when the job ends or its
driver's lease runs out, and progress is put again under the same lease."""

from __future__ import annotations

import dataclasses

import pytest

from gcd.spark.announce import JobRunning, announced_job
from l0gc.contract.kv import Put
from l0gc.contract.spark_job import SparkJob, spark_job_key
from l0gc.etcd.memory import MemoryKV
from tests.publishing import HandClock
from tests.waiting import wait_until

NS = "/l0gc/t"
FIRST = SparkJob("host-1-aaa", "spark-sweep", 100.0, 50.0)
SECOND = SparkJob("host-2-bbb", "spark-sweep", 200.0)


async def test_a_second_job_is_refused_while_the_first_holds_the_namespace() -> None:
    kv = MemoryKV()
    key = spark_job_key(NS)
    async with announced_job(kv, NS, FIRST):
        found = await kv.get(key)
        assert found is not None
        assert SparkJob.decode(found.value) == FIRST
        with pytest.raises(JobRunning, match="job host-1-aaa, application not started yet"):
            async with announced_job(kv, NS, SECOND):
                pytest.fail("the second job ran")
        held = await kv.get(key)
        assert held is not None
        assert SparkJob.decode(held.value) == FIRST
    assert await kv.get(key) is None  # gone with the job
    async with announced_job(kv, NS, SECOND):  # now free
        found = await kv.get(key)
        assert found is not None
        assert SparkJob.decode(found.value) == SECOND


async def test_a_dead_drivers_key_goes_with_its_lease() -> None:
    clock = HandClock()
    kv = MemoryKV(now=clock)
    key = spark_job_key(NS)
    holder = announced_job(kv, NS, FIRST, ttl_s=15)
    await holder.__aenter__()  # a driver killed: nobody exits the block or refreshes
    clock.now += 16
    assert await kv.get(key) is None
    async with announced_job(kv, NS, SECOND):
        found = await kv.get(key)
        assert found is not None
        assert SparkJob.decode(found.value) == SECOND


async def test_an_unreadable_record_is_named_and_refuses() -> None:
    kv = MemoryKV()
    await kv.txn([], [Put(spark_job_key(NS), b"not json")])
    with pytest.raises(JobRunning, match="an unreadable record at /l0gc/t/jobs/spark"):
        async with announced_job(kv, NS, SECOND):
            pytest.fail("the job ran")


async def test_progress_is_put_again_and_a_failing_progress_keeps_the_lease() -> None:
    """Progress that reads differently is put under the same lease; progress that
    raises (Spark stopping) is skipped and the keeper goes on refreshing the lease."""
    kv = MemoryKV()
    key = spark_job_key(NS)
    calls: list[int] = []
    started = dataclasses.replace(FIRST, application_id="app-7", tasks_done=1, tasks=4)

    def progress() -> SparkJob:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the Spark context is stopping")
        return started

    async def record() -> SparkJob | None:
        found = await kv.get(key)
        return None if found is None else SparkJob.decode(found.value)

    async with announced_job(kv, NS, FIRST, progress=progress, ttl_s=3):  # a refresh a second
        await wait_until(lambda: len(calls) >= 3, timeout_s=30, what="three refreshes")
        assert await record() == started
        found = await kv.get(key)
        assert found is not None
        assert found.lease != 0  # still on the job's lease, past the failing read
    assert await record() is None


async def test_a_job_whose_lease_ran_out_never_writes_over_the_job_that_started() -> None:
    """etcd lost this job's lease (its key went with it) and another job took the
    namespace: this one's progress is not written over the other's record; once the
    other ends, the key is this job's again."""
    kv = MemoryKV()
    key = spark_job_key(NS)
    calls: list[int] = []

    def progress() -> SparkJob:
        calls.append(1)
        return dataclasses.replace(FIRST, tasks_done=len(calls), tasks=100)

    async with announced_job(kv, NS, FIRST, progress=progress, ttl_s=3):
        found = await kv.get(key)
        assert found is not None
        await kv.lease_revoke(found.lease)  # the lease ran out
        async with announced_job(kv, NS, SECOND):
            seen = len(calls)
            await wait_until(lambda: len(calls) >= seen + 2, timeout_s=30, what="refreshes")
            taken = await kv.get(key)
            assert taken is not None
            assert SparkJob.decode(taken.value) == SECOND
        await wait_until(lambda: kv.get(key), timeout_s=30, what="the key taken back")
        back = await kv.get(key)
        assert back is not None
        assert SparkJob.decode(back.value).job_id == FIRST.job_id
