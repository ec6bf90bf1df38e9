"""What GC costs and saves: a price table per store, applied to a round's requests and the
bytes it frees (pure, no I/O).

Design notes: docs/internals/rules.md, `gcd.rules.prices`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Final

from l0gc.errors import ConfigError

__all__ = ["DEFAULT_PRICES", "PriceTable", "RoundCost", "prices_for", "round_cost"]

_GIB: Final = 1024**3


@dataclass(frozen=True, slots=True)
class PriceTable:
    """Dollars per 1,000 LIST and DeleteObjects requests, and per GiB-month stored."""

    store: str
    list_per_1000: float
    delete_per_1000: float
    storage_gb_month: float
    source: str

    def __post_init__(self) -> None:
        for name in ("list_per_1000", "delete_per_1000", "storage_gb_month"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigError(
                    f"price {name} {value!r} must be a finite number >= 0 "
                    "(dollars); fix --price-* or the config file"
                )

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)


DEFAULT_PRICES: Final = {
    "s3": PriceTable(
        "s3",
        0.005,
        0.0,
        0.023,
        "aws.amazon.com/s3/pricing: S3 Standard, us-east-1 (LIST $0.005 per 1,000; "
        "DELETE free; first 50 TB $0.023 per GB-month)",
    ),
    "gcs": PriceTable(
        "gcs",
        0.005,
        0.0,
        0.020,
        "cloud.google.com/storage/pricing: Standard, us-east1 (Class A incl. "
        "list $0.005 per 1,000; delete free; $0.020 per GB-month)",
    ),
    "azure": PriceTable(
        "azure",
        0.0055,
        0.0,
        0.0184,
        "azure.microsoft.com/pricing/details/storage/blobs: Hot, LRS, East US "
        "(list $0.055 per 10,000; delete free; first 50 TB $0.0184 per "
        "GB-month)",
    ),
}
"""List prices per store kind (see docs/stores.md#what-gc-costs for the pages' dates)."""


def prices_for(
    store: str,
    *,
    list_per_1000: float | None = None,
    delete_per_1000: float | None = None,
    storage_gb_month: float | None = None,
) -> PriceTable:
    """The table of `store` ("s3", "gcs", "azure"), with any price given replacing its default."""
    base = DEFAULT_PRICES.get(store)
    if base is None:
        raise ConfigError(
            f"no price table for store {store!r}; stores: {', '.join(sorted(DEFAULT_PRICES))}"
        )
    given = [
        name
        for name, value in (
            ("list_per_1000", list_per_1000),
            ("delete_per_1000", delete_per_1000),
            ("storage_gb_month", storage_gb_month),
        )
        if value is not None
    ]
    if not given:
        return base
    return PriceTable(
        store,
        base.list_per_1000 if list_per_1000 is None else list_per_1000,
        base.delete_per_1000 if delete_per_1000 is None else delete_per_1000,
        base.storage_gb_month if storage_gb_month is None else storage_gb_month,
        f"{base.source}; overridden: {', '.join(given)}",
    )


@dataclass(frozen=True, slots=True)
class RoundCost:
    """What one round (or a day of rounds) cost and saved, by the table."""

    list_requests: int
    delete_requests: int
    deleted: int
    deleted_bytes: int
    requests_usd: float
    reclaimed_usd_per_month: float
    lists_per_deleted: float | None
    prices: PriceTable

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the round JSON's ``cost``)."""
        return {
            "requests": {"list": self.list_requests, "delete": self.delete_requests},
            "requests_usd": self.requests_usd,
            "reclaimed_usd_per_month": self.reclaimed_usd_per_month,
            "lists_per_deleted": self.lists_per_deleted,
            "prices": self.prices.to_dict(),
        }


def round_cost(
    list_requests: int, delete_requests: int, deleted: int, deleted_bytes: int, prices: PriceTable
) -> RoundCost:
    """The cost of these request counts and the storage the freed bytes no longer bill."""
    requests_usd = (
        list_requests * prices.list_per_1000 + delete_requests * prices.delete_per_1000
    ) / 1000
    reclaimed = deleted_bytes / _GIB * prices.storage_gb_month
    per = None if deleted == 0 else round(list_requests / deleted, 6)
    return RoundCost(
        list_requests, delete_requests, deleted, deleted_bytes, requests_usd, reclaimed, per, prices
    )
