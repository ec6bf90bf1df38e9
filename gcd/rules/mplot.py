"""M against the cluster epoch over time, as an SVG (pure: samples in, text out).

The cluster epoch and M are drawn as step lines (each value holds until the next
sample), the gap between them shaded: that gap is the garbage M holds back. Each stretch
is labelled with the partition that pinned M then (its M(p) is M); a stretch where M was
unknown (blocked or paused) is left out of M's line and marked. Every string from etcd
is escaped for XML and made printable. Checked in a real browser by
tests/gcd/rules/test_mplot.py (deep tier).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol
from xml.sax.saxutils import escape

from l0gc.display import printable

__all__ = ["render_svg"]

WIDTH, HEIGHT = 900, 360
_LEFT, _RIGHT, _TOP, _BOTTOM = 70, 20, 40, 50
CLUSTER_COLOUR, M_COLOUR, GAP_COLOUR = "#1f77b4", "#d62728", "#fbe3e3"
XScale = Callable[[float], float]
YScale = Callable[[int], float]


class _Sample(Protocol):
    @property
    def at(self) -> float: ...
    @property
    def cluster_epoch(self) -> int | None: ...
    @property
    def safe_epoch(self) -> int | None: ...
    @property
    def pinning(self) -> tuple[tuple[str, int], ...]: ...


def render_svg(samples: Sequence[_Sample], now: float, *, title: str = "") -> str:
    """The picture of `samples` up to `now` (an empty one says so)."""
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>'
        f'<text x="{_LEFT}" y="22" font-size="14">'
        f"{_text(title or 'M and the cluster epoch')}</text>"
    )
    epochs = [v for s in samples for v in (s.cluster_epoch, s.safe_epoch) if v is not None]
    if not epochs:
        return head + (
            f'<text x="{_LEFT}" y="{HEIGHT // 2}">no sample yet: the daemon has '
            "not read M since it started</text></svg>\n"
        )
    start = samples[0].at
    end = max(now, samples[-1].at, start + 1.0)
    low, high = min(epochs), max(epochs)
    if high == low:
        high = low + 1

    def x(at: float) -> float:
        return _LEFT + (at - start) / (end - start) * (WIDTH - _LEFT - _RIGHT)

    def y(epoch: int) -> float:
        return HEIGHT - _BOTTOM - (epoch - low) / (high - low) * (HEIGHT - _TOP - _BOTTOM)

    parts = [head, *_axes((start, end), (low, high), x, y)]
    cluster = _steps([(s.at, s.cluster_epoch) for s in samples], end, x, y)
    m = _steps([(s.at, s.safe_epoch) for s in samples], end, x, y)
    parts += [
        f'<polygon fill="{GAP_COLOUR}" points="{_gap(line, samples, end, x, y)}"/>' for line in m
    ]
    parts += [
        f'<polyline fill="none" stroke="{CLUSTER_COLOUR}" stroke-width="2" points="{_points(p)}"/>'
        for p in cluster
    ]
    parts += [
        f'<polyline fill="none" stroke="{M_COLOUR}" stroke-width="2" points="{_points(p)}"/>'
        for p in m
    ]
    parts += _labels(samples, end, x, y)
    parts += [
        f'<rect x="{WIDTH - 250}" y="10" width="12" height="3" fill="{CLUSTER_COLOUR}"/>',
        f'<text x="{WIDTH - 232}" y="16">cluster epoch</text>',
        f'<rect x="{WIDTH - 140}" y="10" width="12" height="3" fill="{M_COLOUR}"/>',
        f'<text x="{WIDTH - 122}" y="16">M (pinned by)</text>',
        "</svg>\n",
    ]
    return "".join(parts)


def _clock(at: float) -> str:
    """HH:MM in UTC of unix time `at` (arithmetic: no clock or calendar here)."""
    minutes = int(at // 60)
    return f"{minutes // 60 % 24:02d}:{minutes % 60:02d}"


def _text(value: str) -> str:
    return escape(printable(value)[:80])


def _steps(
    values: list[tuple[float, int | None]], end: float, x: XScale, y: YScale
) -> list[list[tuple[float, float]]]:
    """Step polylines (a known value holds until the next sample); None breaks the line."""
    lines: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for index, (at, value) in enumerate(values):
        until = values[index + 1][0] if index + 1 < len(values) else end
        if value is None:
            if current:
                lines.append(current)
            current = []
            continue
        current += [(x(at), y(value)), (x(until), y(value))]
    if current:
        lines.append(current)
    return lines


def _points(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{px:.1f},{py:.1f}" for px, py in points)


def _gap(
    m_line: list[tuple[float, float]], samples: Sequence[_Sample], end: float, x: XScale, y: YScale
) -> str:
    """The shaded area between M's line and the cluster epoch's, over M's stretch."""
    first, last = m_line[0][0], m_line[-1][0]
    top = [
        point
        for line in _steps([(s.at, s.cluster_epoch) for s in samples], end, x, y)
        for point in line
        if first <= point[0] <= last
    ]
    return _points(m_line + list(reversed(top)))


def _labels(samples: Sequence[_Sample], end: float, x: XScale, y: YScale) -> list[str]:
    """The pinning partition's name at the start of each stretch it pinned M; a marker
    where M was unknown (blocked or paused)."""
    labels: list[str] = []
    previous: str | None = None
    for sample in samples:
        name = sample.pinning[0][0] if sample.pinning else None
        if sample.safe_epoch is None:
            if previous != "\0":
                labels.append(
                    f'<text x="{min(x(sample.at), WIDTH - _RIGHT):.1f}" '
                    f'y="{_TOP - 6}" text-anchor="end" fill="#777">'
                    "M unknown from here (blocked or paused)</text>"
                )
            previous = "\0"
            continue
        if name is not None and name != previous:
            labels.append(
                f'<text x="{x(sample.at) + 3:.1f}" '
                f'y="{y(sample.safe_epoch) - 5:.1f}" fill="{M_COLOUR}">'
                f"{_text(name)}</text>"
            )
        previous = name
    return labels


def _axes(times: tuple[float, float], epochs: tuple[int, int], x: XScale, y: YScale) -> list[str]:
    (start, end), (low, high) = times, epochs
    bottom, right, middle = HEIGHT - _BOTTOM, WIDTH - _RIGHT, (_TOP + HEIGHT - _BOTTOM) // 2
    parts = [
        f'<line x1="{_LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#444"/>',
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}" stroke="#444"/>',
        (
            f'<text x="{(_LEFT + right) // 2}" y="{HEIGHT - 12}" text-anchor="middle">'
            "time (UTC)</text>"
        ),
        (
            f'<text x="16" y="{middle}" transform="rotate(-90 16 {middle})" '
            'text-anchor="middle">epoch</text>'
        ),
    ]
    ticks = [start + (end - start) * index / 4 for index in range(5)]
    parts += [
        f'<text x="{x(at):.1f}" y="{bottom + 16}" text-anchor="middle">{_clock(at)}</text>'
        for at in ticks
    ]
    step = max(1, (high - low) // 5)
    marks = [*range(low, high - step // 2, step), high]  # the top is always named
    parts += [
        f'<text x="{_LEFT - 6}" y="{y(epoch) + 4:.1f}" text-anchor="end">{epoch}</text>'
        for epoch in marks
    ]
    return parts
