"""report.png as an operator reads it (`gcd.spark.chart`, no SparkSession needed):
garbage still in the grace period is its own series, sizes are in binary units, the
legend stays off the bars, and the totals and costs are written on the chart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gcd.spark.chart import binary_unit, figure, human_size, save_chart, usd
from gcd.spark.report import list_requests

GIB = 2**30


@pytest.fixture
def epochs() -> pd.DataFrame:
    """Epochs 1-4 with M = 2: epoch 2 holds deletable and too-young objects."""
    return pd.DataFrame(
        {
            "epoch": [1, 2, 3, 4],
            "objects": [4, 4, 2, 5],
            "bytes": [11 * GIB, 7 * GIB, 2 * GIB, GIB // 2],
            "eligible_objects": [4, 3, 0, 0],
            "eligible_bytes": [11 * GIB, 2 * GIB, 0, 0],
            "in_grace_objects": [0, 1, 0, 0],
            "in_grace_bytes": [0, 5 * GIB, 0, 0],
            "live_objects": [0, 0, 2, 5],
            "live_bytes": [0, 0, 2 * GIB, GIB // 2],
        }
    )


SUMMARY: dict[str, Any] = {
    "safe_epoch": 2,
    "cluster_epoch": 8,
    "objects": 16,
    "bytes": 20 * GIB + GIB // 2 + 50,
    "eligible_objects": 7,
    "eligible_bytes": 13 * GIB,
    "in_grace_objects": 1,
    "in_grace_bytes": 5 * GIB,
    "live_objects": 7,
    "live_bytes": 2 * GIB + GIB // 2,
    "unparsable_objects": 1,
    "unparsable_bytes": 50,
    "price_per_gb_month": 0.023,
    "garbage_monthly_cost_usd": 18 * 0.023,
    "list_requests_full_listing": 1,
    "list_requests_sweep": 3,
    "price_per_1000_list_requests": 0.005,
    "list_cost_full_listing_usd": 0.000005,
    "list_cost_sweep_usd": 0.000015,
}


@pytest.fixture
def drawn(epochs: pd.DataFrame) -> Iterator[Any]:
    """The chart's Figure, drawn once (so text extents are known), closed afterwards."""
    from matplotlib import pyplot as plt  # noqa: PLC0415

    fig = figure(epochs, SUMMARY)
    fig.canvas.draw()
    yield fig
    plt.close(fig)


def series(axes: Any) -> dict[str, list[float]]:
    """Bar heights per legend label, in epoch order."""
    return {
        container.get_label(): [bar.get_height() for bar in container]
        for container in axes.containers
    }


def test_too_young_garbage_is_not_drawn_as_deletable(drawn: Any) -> None:
    """Three stacked series: deletable now, too young (in the grace period), live."""
    top, bottom = drawn.axes[0], drawn.axes[1]
    objects = {label.split(" (")[0]: heights for label, heights in series(top).items()}
    assert objects == {
        "deletable now": [4, 3, 0, 0],
        "too young": [0, 1, 0, 0],
        "live": [0, 0, 2, 5],
    }
    sizes = {label.split(" (")[0]: heights for label, heights in series(bottom).items()}
    assert sizes["too young"] == [0, 5, 0, 0]  # GiB, on top of the 2 deletable GiB
    assert [bar.get_y() for bar in bottom.containers[1]] == [11, 2, 0, 0]


def test_sizes_are_drawn_in_binary_units_without_an_offset(drawn: Any) -> None:
    """The size axis says GiB and its ticks are plain numbers (no '1e10' above the axis)."""
    bottom = drawn.axes[1]
    assert bottom.get_ylabel() == "size (GiB)"
    assert bottom.yaxis.get_offset_text().get_text() == ""
    assert max(bottom.get_yticks()) < 1024
    assert bottom.get_ylim()[1] > 11  # the tallest stack is not cut off


def test_the_legend_stays_off_the_panels(drawn: Any) -> None:
    """One figure legend, above the panels: it overlaps neither panel."""
    assert drawn.axes[0].get_legend() is None
    assert drawn.axes[1].get_legend() is None
    (legend,) = drawn.legends
    box = legend.get_window_extent()
    for axes in drawn.axes[:2]:
        assert not box.overlaps(axes.get_window_extent())
    labels = [text.get_text() for text in legend.get_texts()]
    assert "M = 2" in labels
    assert any(label.startswith("too young") for label in labels)


def test_totals_and_costs_are_written_on_the_chart(drawn: Any, tmp_path: Path) -> None:
    """Totals in human units, the storage cost and the LIST requests are on the chart."""
    text = " ".join(t.get_text() for axes in drawn.axes for t in axes.texts)
    assert "16 objects, 20.5 GiB under the root" in text
    assert "7 deletable now (13.0 GiB)" in text
    assert "1 too young (5.0 GiB)" in text
    assert "garbage storage 0.41 USD/month" in text
    assert "a full listing ~1 request" in text
    assert "a sweep ~3 requests" in text
    path = tmp_path / "report.png"
    save_chart(
        pd.DataFrame(
            {
                c: []
                for c in (
                    "epoch",
                    "objects",
                    "bytes",
                    "eligible_objects",
                    "eligible_bytes",
                    "in_grace_objects",
                    "in_grace_bytes",
                    "live_objects",
                    "live_bytes",
                )
            }
        ),
        SUMMARY,
        path,
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # an empty report still draws


def test_units_and_costs_for_people() -> None:
    """Binary units from B to EiB; costs below a cent say so instead of 0.00."""
    assert binary_unit(1023) == ("B", 1)
    assert binary_unit(1024) == ("KiB", 1024)
    assert binary_unit(3 * GIB) == ("GiB", GIB)
    assert human_size(50) == "50 B"
    assert human_size(1536) == "1.5 KiB"
    assert human_size(7 * 2**50) == "7.0 PiB"
    assert (usd(0), usd(0.004), usd(1234.567)) == ("0 USD", "< 0.01 USD", "1,234.57 USD")


def test_list_requests_follow_the_garbage() -> None:
    """A full listing reads every key, 1,000 a page; a sweep reads the garbage and makes
    one more request per prefix that holds live objects."""
    assert list_requests(0, 0, 0) == (1, 1)
    assert list_requests(2500, 0, 3) == (3, 3)
    assert list_requests(1_000_000, 10_500, 1000) == (1000, 1011)
