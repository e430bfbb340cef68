"""Bar charts as inline SVG geometry, computed here and drawn by the templates (no script, no
chart library: the CSP allows neither inline code nor third-party files)."""

from __future__ import annotations

from dataclasses import dataclass

WIDTH = 640
HEIGHT = 180
_LABEL_ROOM = 20  # below the bars, for the first and last labels


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: str


@dataclass(frozen=True)
class Chart:
    title: str
    bars: tuple[Bar, ...]
    maximum: str
    width: int = WIDTH
    height: int = HEIGHT
    baseline: float = HEIGHT - _LABEL_ROOM


def bar_chart(title: str, points: list[tuple[str, float]], fmt: str = "{:g}") -> Chart:
    """One bar per (label, value), scaled to the largest value (a zero chart has no bars)."""
    top = max((v for _, v in points), default=0.0)
    room = HEIGHT - _LABEL_ROOM - 4
    slot = WIDTH / max(len(points), 1)
    bars = []
    for i, (label, value) in enumerate(points):
        h = 0.0 if top <= 0 else room * value / top
        bars.append(
            Bar(
                x=round(i * slot + slot * 0.1, 2),
                y=round(HEIGHT - _LABEL_ROOM - h, 2),
                width=round(slot * 0.8, 2),
                height=round(h, 2),
                label=label,
                value=fmt.format(value),
            )
        )
    return Chart(title, tuple(bars), fmt.format(top))
