"""`report.png` of `gcd spark-report`: where the garbage is, by epoch, as an operator reads it.

Design notes: docs/internals/spark.md, `gcd.spark.chart`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

__all__ = ["SERIES", "binary_unit", "figure", "human_size", "save_chart", "usd"]

SERIES: Final = (
    ("eligible", "deletable now (epoch <= M, past the grace period)", "tab:red"),
    ("in_grace", "too young (epoch <= M, in the grace period)", "tab:orange"),
    ("live", "live (epoch > M)", "tab:blue"),
)
"""(column prefix in the epoch table, legend label, colour), bottom to top."""
_UNITS: Final = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_BARS_UP_TO: Final = 400  # epochs; more are drawn as filled steps (thousands of bars are slow)


def binary_unit(count: float) -> tuple[str, int]:
    """The largest binary unit `count` bytes is at least one of: (name, bytes per unit)."""
    power = 0
    while power + 1 < len(_UNITS) and abs(count) >= 1024 ** (power + 1):
        power += 1
    return _UNITS[power], 1024**power


def human_size(count: float) -> str:
    """1536 -> '1.5 KiB', 50 -> '50 B'."""
    unit, scale = binary_unit(count)
    return f"{count:.0f} B" if scale == 1 else f"{count / scale:.1f} {unit}"


def usd(amount: float) -> str:
    """A cost for people: '0 USD', '< 0.01 USD', '1,234.57 USD'."""
    if amount == 0:
        return "0 USD"
    if amount < 0.01:
        return "< 0.01 USD"
    return f"{amount:,.2f} USD"


def _totals_text(summary: dict[str, Any]) -> str:
    def part(objects: int, size: int, what: str) -> str:
        return f"{objects:,} {what} ({human_size(size)})"

    parts = [
        part(summary["eligible_objects"], summary["eligible_bytes"], "deletable now"),
        part(summary["in_grace_objects"], summary["in_grace_bytes"], "too young"),
        part(summary["live_objects"], summary["live_bytes"], "live"),
        part(summary["unparsable_objects"], summary["unparsable_bytes"], "unparsable"),
    ]
    head = f"{summary['objects']:,} objects, {human_size(summary['bytes'])} under the root: "

    def requests(count: int) -> str:
        return f"~{count:,} request{'' if count == 1 else 's'}"

    costs = (
        f"garbage storage {usd(summary['garbage_monthly_cost_usd'])}/month at "
        f"{summary['price_per_gb_month']} USD per GB-month;  LIST: a full listing "
        f"{requests(summary['list_requests_full_listing'])} "
        f"({usd(summary['list_cost_full_listing_usd'])}), a sweep "
        f"{requests(summary['list_requests_sweep'])} ({usd(summary['list_cost_sweep_usd'])}) "
        f"at {summary['price_per_1000_list_requests']} USD per 1,000"
    )
    return head + ", ".join(parts) + "\n" + costs


def _draw_series(axes: Any, epochs: Any, column: str, scale: float, bars: bool) -> None:
    """Stack the three series of `column` ("objects" or "bytes") per epoch; the y axis
    starts at 0 and leaves room above the tallest stack."""
    x = epochs["epoch"].to_numpy()
    bottom = None
    for name, label, color in SERIES:
        heights = epochs[f"{name}_{column}"].to_numpy(dtype=float) / scale
        base = heights * 0 if bottom is None else bottom
        if bars:
            axes.bar(x, heights, bottom=base, color=color, width=0.8, label=label)
        else:
            axes.fill_between(
                x, base, base + heights, step="mid", color=color, label=label, linewidth=0
            )
        bottom = base + heights
    tallest = 0.0 if bottom is None or not len(bottom) else float(bottom.max())
    axes.set_ylim(0, tallest * 1.08 if tallest > 0 else 1)


def figure(epochs: Any, summary: dict[str, Any]) -> Any:
    """The chart as a matplotlib Figure (Agg backend); the caller closes it."""
    import matplotlib as mpl  # noqa: PLC0415

    mpl.use("Agg")
    from matplotlib import pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    tallest = float((epochs["bytes"].max() if len(epochs) else 0) or 0)
    unit, scale = binary_unit(tallest)
    fig = plt.figure(figsize=(11, 7.5), layout="constrained")
    grid = fig.add_gridspec(3, 1, height_ratios=(5, 5, 1.2))
    top = fig.add_subplot(grid[0])
    bottom = fig.add_subplot(grid[1], sharex=top)
    notes = fig.add_subplot(grid[2])
    bars = len(epochs) <= _BARS_UP_TO
    for axes, column, label in ((top, "objects", "objects"), (bottom, "bytes", f"size ({unit})")):
        _draw_series(axes, epochs, column, scale if column == "bytes" else 1, bars)
        axes.set_ylabel(label)
        axes.yaxis.set_major_locator(MaxNLocator(integer=column == "objects"))
        axes.ticklabel_format(axis="y", style="plain", useOffset=False)
        safe_epoch = summary.get("safe_epoch")
        if safe_epoch is not None:
            axes.axvline(safe_epoch + 0.5, color="black", linestyle="--", label=f"M = {safe_epoch}")
    top.tick_params(labelbottom=False)
    bottom.set_xlabel("epoch")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    cluster = summary.get("cluster_epoch")
    title = "L0 objects by epoch"
    top.set_title(title if cluster is None else f"{title} (cluster epoch {cluster})")
    handles, labels = top.get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="outside upper center",
        ncols=len(labels),
        fontsize="small",
        frameon=False,
    )
    notes.axis("off")
    text = notes.text(
        0.0,
        1.0,
        _totals_text(summary),
        va="top",
        ha="left",
        fontsize="small",
        transform=notes.transAxes,
        wrap=True,
    )
    text.set_in_layout(False)  # long lines must not squeeze the panels
    return fig


def save_chart(epochs: Any, summary: dict[str, Any], path: Path) -> None:
    """Draw the chart and write it as a PNG to `path`."""
    from matplotlib import pyplot as plt  # noqa: PLC0415

    fig = figure(epochs, summary)
    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
