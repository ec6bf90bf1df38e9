"""The picture of M against the cluster epoch (`gcd.rules.mplot`): well-formed SVG
whatever the partition names, the lines and labels where they belong, and (deep tier)
drawn by a real headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from gcd.observe.trail import MSample
from gcd.rules.mplot import CLUSTER_COLOUR, HEIGHT, M_COLOUR, WIDTH, render_svg

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_800_000_000.0
HOSTILE = '</text><script>alert(1)</script>\x1b[2J"&'


def samples() -> list[MSample]:
    """Two hours: M follows the cluster epoch, then `orders/7` pins it at 40 while the
    epoch climbs to 60, then a pause (M unknown)."""
    out = [
        MSample(T0 + 60 * i, 40 + i // 6, 38 + i // 6, (("orders/1", 38 + i // 6),))
        for i in range(12)
    ]
    out += [MSample(T0 + 720 + 60 * i, 42 + i // 3, 40, (("orders/7", 40),)) for i in range(54)]
    out += [MSample(T0 + 4000, 60, 40, ((HOSTILE, 40),)), MSample(T0 + 7000, 61, None)]
    return out


def test_the_picture_is_well_formed_with_both_lines_and_the_pinning_partitions() -> None:
    svg = render_svg(samples(), T0 + 7200, title="M and the cluster epoch /l0gc/prod")
    root = ElementTree.fromstring(svg)  # hostile names cannot break the document
    colours = [line.get("stroke") for line in root.iter(f"{SVG}polyline")]
    assert CLUSTER_COLOUR in colours
    assert M_COLOUR in colours
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert {"orders/1", "orders/7", "cluster epoch", "M (pinned by)"} <= set(texts)
    assert "M unknown from here (blocked or paused)" in texts
    assert any("<script>" in t and "\\x1b" in t for t in texts)  # shown, escaped, inert
    assert not list(root.iter(f"{SVG}script"))
    assert "61" in texts  # the epoch axis names the highest cluster epoch


def test_no_sample_says_so() -> None:
    root = ElementTree.fromstring(render_svg([], T0))
    assert any("no sample yet" in (t.text or "") for t in root.iter(f"{SVG}text"))


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is missing: scripts/install-chromium.sh --required installs it"
    return found


@pytest.mark.deep  # a real browser: ~2 s, and the deep tier installs it
def test_a_real_headless_chromium_draws_both_lines(tmp_path: Path) -> None:
    from PIL import Image  # noqa: PLC0415 - the deep tier's (Pillow, pinned in dev)

    page = tmp_path / "m.svg"
    page.write_text(render_svg(samples(), T0 + 7200))
    shot = tmp_path / "m.png"
    done = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    raw = Image.open(shot).convert("RGB").tobytes()
    counts: dict[tuple[int, int, int], int] = {}
    for at in range(0, len(raw), 3):
        pixel = (raw[at], raw[at + 1], raw[at + 2])
        counts[pixel] = counts.get(pixel, 0) + 1

    def near(colour: str) -> int:
        want = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
        return sum(
            n
            for px, n in counts.items()
            if all(abs(a - b) <= 24 for a, b in zip(px, want, strict=True))
        )

    assert near(CLUSTER_COLOUR) > 300, "the cluster epoch's line is not drawn"
    assert near(M_COLOUR) > 300, "M's line is not drawn"
    assert counts.get((255, 255, 255), 0) > WIDTH * HEIGHT // 3  # a page, not an error
