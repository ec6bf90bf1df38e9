"""The namespace's delete rate budget, which a Spark job takes over while it runs.

Every deleting sweeper announces its rate under ``{ns}/sweepers/`` (`gcd.sweep.shards`);
the namespace's budget is their sum (unlimited when one of them is). While a Spark job
holds the namespace (`gcd.spark.announce`) the daemons do not delete (`gcd.sweep.binding`
refuses their rounds), so the job may use the whole budget and no more: without
`--max-deletes-per-second` it takes the budget, with it the lower of the two. No daemon
announced: the flag alone. Design notes: docs/internals/spark.md, `gcd.spark.budget`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog

from gcd.sweep.shards import ShardAnnouncement
from l0gc.contract.kv import KV

__all__ = ["RateBudget", "read_budget"]

log = structlog.get_logger("gcd.spark")


@dataclass(frozen=True, slots=True)
class RateBudget:
    """The running daemons' rates, and what the job makes of them with its flag."""

    daemons: int
    budget: float | None
    """The sum of the daemons' rates; None: no daemon, or one of them unlimited."""
    flag: float | None
    """`--max-deletes-per-second` as given (None: not given)."""

    @property
    def rate(self) -> float | None:
        """The job's rate: the budget, the flag, or the lower of both (None: unlimited)."""
        if self.budget is None:
            return self.flag
        return self.budget if self.flag is None else min(self.flag, self.budget)

    def to_dict(self) -> dict[str, Any]:
        """The summary's `rate`."""
        return {
            "max_deletes_per_second": self.rate,
            "namespace_budget": self.budget,
            "daemons": self.daemons,
            "flag": self.flag,
        }


async def read_budget(kv: KV, sweepers_prefix: str, flag: float | None) -> RateBudget:
    """The budget of the daemons announced under `sweepers_prefix`; an announcement that
    cannot be read is left out of the sum and logged (the flag still bounds the job)."""
    found = await kv.range_prefix(sweepers_prefix)
    rates: list[float | None] = []
    for item in found.items:
        try:
            rates.append(ShardAnnouncement.decode(item.value).max_deletes_per_second)
        except ValueError as exc:
            log.warning("spark.budget_unreadable", key=item.key, error=str(exc))
    limited = [rate for rate in rates if rate is not None]
    budget = sum(limited) if rates and len(limited) == len(rates) else None
    return RateBudget(len(rates), budget, flag)
