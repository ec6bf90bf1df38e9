"""A running `gcd spark-sweep`, announced in etcd: one per namespace, on its driver's lease.

``{ns}/jobs/spark`` is created (only if absent) by a Spark job that deletes, before its
Spark session starts, under a lease the driver keeps alive; its progress is put again
as the job runs, and the key goes when the job ends (or its lease runs out: a driver
that died). A second job finds it and refuses; `gcd status` shows it. Not under
``{ns}/sweepers/``: a Spark job sweeps every shard, and the daemons' shard agreement
must not read it as a shard announcement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from l0gc import strictjson

__all__ = ["SPARK_JOB_VERSION", "SparkJob", "spark_job_key"]

SPARK_JOB_VERSION: Final = 1
_MAX_BYTES = 4096
_TEXT = 200


def spark_job_key(namespace: str) -> str:
    """The key a running Spark job of `namespace` holds."""
    return f"{namespace}/jobs/spark"


@dataclass(frozen=True, slots=True)
class SparkJob:
    """What `gcd status` shows of a running Spark job, and what a second one is told."""

    job_id: str
    """The driver process (host-pid-random), known before Spark starts."""
    command: str
    started_at: float
    max_deletes_per_second: float | None = None
    """The job's whole delete rate (None: unlimited)."""
    application_id: str | None = None
    """Spark's application id, once its session runs."""
    tasks_done: int = 0
    tasks: int = 0
    """Tasks completed and in all, of the stages running now (0/0: none running)."""

    def encode(self) -> bytes:
        """Compact JSON with a version."""
        doc = {"version": SPARK_JOB_VERSION, **asdict(self)}
        return strictjson.dumps(doc, what="spark job", sort_keys=True, compact=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> SparkJob:
        """Parse a record; ValueError says what is wrong."""
        doc = strictjson.loads(raw, what="spark job", max_bytes=_MAX_BYTES, max_depth=1)
        if not isinstance(doc, dict) or doc.get("version") != SPARK_JOB_VERSION:
            raise ValueError(f"not a version {SPARK_JOB_VERSION} spark job record")
        return cls(
            job_id=_text(doc, "job_id"),
            command=_text(doc, "command"),
            started_at=_number(doc, "started_at"),
            max_deletes_per_second=_optional_number(doc, "max_deletes_per_second"),
            application_id=None
            if doc.get("application_id") is None
            else _text(doc, "application_id"),
            tasks_done=_count(doc, "tasks_done"),
            tasks=_count(doc, "tasks"),
        )

    def describe(self) -> str:
        """One line: the command, its application, since when, its rate and progress."""
        app = self.application_id or "not started yet"
        rate = (
            "unlimited"
            if self.max_deletes_per_second is None
            else f"{self.max_deletes_per_second:g} keys/s"
        )
        done = f", tasks {self.tasks_done}/{self.tasks}" if self.tasks else ""
        return f"{self.command} (job {self.job_id}, application {app}, rate {rate}{done})"


def _text(doc: Mapping[str, Any], name: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str) or not 0 < len(value) <= _TEXT:
        raise ValueError(f"spark job record's {name} is not a short string")
    return value


def _optional_text(doc: Mapping[str, Any], name: str) -> str | None:
    return None if doc.get(name) is None else _text(doc, name)


def _number(doc: Mapping[str, Any], name: str) -> float:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"spark job record's {name} is not a number")
    return float(value)


def _optional_number(doc: Mapping[str, Any], name: str) -> float | None:
    return None if doc.get(name) is None else _number(doc, name)


def _count(doc: Mapping[str, Any], name: str) -> int:
    value = doc.get(name, 0)
    if type(value) is not int or value < 0:
        raise ValueError(f"spark job record's {name} is not a count")
    return value
