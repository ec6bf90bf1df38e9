"""What the sweepers' rounds of the last 24 hours requested and freed (pure, no I/O).

Design notes: docs/internals/rules.md, `gcd.rules.usage`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gcd.rules.prices import PriceTable, RoundCost, prices_for, round_cost
from l0gc import strictjson
from l0gc.errors import InvalidJson, InvalidRecord

__all__ = ["HOURS", "Usage", "day_cost"]

HOURS: Final = 24
_MAX_BYTES: Final = 64 * 1024


@dataclass(slots=True)
class Usage:
    """One shard's hourly counts: hour -> [LIST, DeleteObjects, objects, bytes, usd]."""

    prices: PriceTable
    hours: dict[int, list[float]] = field(default_factory=dict)

    def add(self, hour: int, counts: Iterable[int]) -> None:
        """Add a round's counts to `hour` (unix seconds // 3600), its request dollars at
        `prices`; forget hours past a day."""
        row = self.hours.setdefault(hour, [0, 0, 0, 0, 0.0])
        given = [max(0, int(value)) for value in counts][:4]
        for index, value in enumerate(given):
            row[index] += value
        row[4] += round_cost(given[0], given[1], 0, 0, self.prices).requests_usd
        for old in [h for h in self.hours if h <= hour - HOURS]:
            del self.hours[old]

    def day(self, hour: int) -> list[float]:
        """The sums of the `HOURS` hours up to and including `hour`."""
        total = [0, 0, 0, 0, 0.0]
        for at, row in self.hours.items():
            if hour - HOURS < at <= hour:
                total = [a + b for a, b in zip(total, row, strict=True)]
        return total

    def encode(self) -> bytes:
        """The record's bytes."""
        doc = {
            "v": 1,
            "prices": self.prices.to_dict(),
            "hours": {str(h): row for h, row in sorted(self.hours.items())},
        }
        return strictjson.dumps(doc, what="usage record", compact=True).encode()

    @classmethod
    def decode(cls, raw: bytes, source: str) -> Usage:
        """A record; InvalidRecord when it is not one."""
        try:
            doc: Any = strictjson.loads(raw, what="usage record", max_bytes=_MAX_BYTES, max_depth=4)
            prices = doc["prices"]
            table = prices_for(
                str(prices["store"]),
                list_per_1000=prices["list_per_1000"],
                delete_per_1000=prices["delete_per_1000"],
                storage_gb_month=prices["storage_gb_month"],
            )
            table = PriceTable(
                table.store,
                table.list_per_1000,
                table.delete_per_1000,
                table.storage_gb_month,
                str(prices.get("source", "")),
            )
            hours = {
                int(h): [*(int(v) for v in row[:4]), float(row[4])]
                for h, row in doc["hours"].items()
            }
        except (InvalidJson, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidRecord(f"{source}: not a usage record ({exc})") from exc
        if doc.get("v") != 1:
            raise InvalidRecord(f"{source}: not a version 1 usage record")
        return cls(table, hours)


def day_cost(records: Mapping[str, Usage], now: float) -> RoundCost | None:
    """The last day's counts of every shard and their cost (each at its own prices; the
    table shown is the first shard's). None when no shard reported."""
    if not records:
        return None
    hour = int(now // 3600)
    lists = deletes = deleted = freed = 0
    usd = reclaimed = 0.0
    for usage in records.values():
        row = usage.day(hour)
        counts = [int(value) for value in row[:4]]
        cost = round_cost(counts[0], counts[1], counts[2], counts[3], usage.prices)
        lists, deletes, deleted, freed = (
            lists + counts[0],
            deletes + counts[1],
            deleted + counts[2],
            freed + counts[3],
        )
        usd += row[4]
        reclaimed += cost.reclaimed_usd_per_month
    first = next(iter(records.values())).prices
    total = round_cost(lists, deletes, deleted, freed, first)
    return RoundCost(lists, deletes, deleted, freed, usd, reclaimed, total.lists_per_deleted, first)
