"""Charts of ``activity()`` drawn on the server as SVG: pure functions from
a list of buckets to a string, so that the pages keep their no-JavaScript
policy and a chart can be tested without a database or a browser.

A bucket is any object with the columns of ``activity()`` as attributes
(``bucket_start``, the counts, ``pending``/``due`` depth, ``wait_p50`` …
``run_p95`` as timedeltas); None is "no figure": a depth not sampled, a
duration with no job finished. A series is never told apart by colour
alone: each has its own dash pattern and marker shape, the legend shows
both, and the line is labelled by name at its last point. The SVG is an
``role="img"`` named by its ``<title>`` and described by a ``<desc>`` that
sums the figures up, and ``figures()`` gives the same numbers as a table to show beside it.
Colours are presentation attributes (the dashboard's Content-Security-Policy
refuses inline style), from the Okabe–Ito palette, which colour-blind
readers tell apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence
from xml.sax.saxutils import escape, quoteattr

WIDTH, HEIGHT = 720, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 92, 40, 40  # room for y labels, direct labels, legend, x labels
MARKER_LIMIT = 72      # above this many buckets a marker on every point is clutter: only isolated points get one
LABEL_SPACING = 13     # least vertical distance between two direct labels
X_TICKS = 6


@dataclass(frozen=True)
class Series:
    column: str   # the activity() column
    label: str
    colour: str
    dash: str     # stroke-dasharray; "" is solid
    marker: str   # circle, square, triangle or diamond


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    unit: str     # "count" or "duration"
    series: tuple[Series, ...]
    empty: str    # what it means when no bucket has a figure
    totals: bool = False  # figures per bucket that add up (counts of events), unlike depths and percentiles


BLUE, GREEN, VERMILLION, PURPLE = "#0072b2", "#009e73", "#d55e00", "#cc79a7"
THROUGHPUT = Chart("throughput", "Jobs per {bucket}", "count", (
    Series("submitted", "submitted", BLUE, "", "circle"),
    Series("completed", "completed", GREEN, "8 4", "square"),
    Series("failed", "failed", VERMILLION, "2 3", "triangle"),
    Series("retried", "retried", PURPLE, "10 3 2 3", "diamond"),
), "no job was submitted or settled in this range", totals=True)
DEPTH = Chart("depth", "Backlog when sampled", "count", (
    Series("pending", "pending", BLUE, "", "circle"),
    Series("due", "due", VERMILLION, "8 4", "triangle"),
), "no depth was sampled in this range (the sampler has not run)")
WAIT = Chart("wait", "Wait: due → claimed", "duration", (
    Series("wait_p50", "p50", BLUE, "", "circle"),
    Series("wait_p95", "p95", VERMILLION, "8 4", "triangle"),
), "no job completed or failed in this range")
RUN = Chart("run", "Run: claimed → finished", "duration", (
    Series("run_p50", "p50", GREEN, "", "square"),
    Series("run_p95", "p95", PURPLE, "8 4", "diamond"),
), "no job completed or failed in this range")
CHARTS = (THROUGHPUT, DEPTH, WAIT, RUN)


@dataclass(frozen=True)
class Figures:
    """The figures of a chart as a table: one row per bucket, cells as text."""

    caption: str
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]


# Public: the SVG and the table -----------------------------------------------------------

def svg(chart: Chart, buckets: Sequence[Any], *, chart_id: str, subject: str = "all queues") -> str:
    """The chart of ``buckets`` (oldest first) as an inline ``<svg>`` element;
    ``chart_id`` makes its element ids unique in the page."""
    name = f"{title(chart, buckets)}, {subject}"
    values = [[_value(chart, getattr(b, s.column)) for b in buckets] for s in chart.series]
    known = [v for column in values for v in column if v is not None]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}"'
           f' width="{WIDTH}" height="{HEIGHT}" role="img"'
           f' aria-labelledby="{chart_id}-title" aria-describedby="{chart_id}-desc"'
           f' data-chart={quoteattr(chart.name)}>',
           f'<title id="{chart_id}-title">{escape(name)}</title>',
           f'<desc id="{chart_id}-desc">{escape(describe(chart, buckets))}</desc>']
    top, step = _scale(chart, max(known, default=0))
    out += _frame(chart, buckets, top, step)
    out += _legend(chart)
    if not known:
        out.append(f'<text class="no-data" x="{LEFT + _plot_width() / 2:.1f}" y="{TOP + _plot_height() / 2:.1f}"'
                   f' text-anchor="middle" fill="#5d6677">{escape(_sentence(chart.empty))}</text>')
    labels = []
    for series, column in zip(chart.series, values):
        points = [None if v is None else (_x(i, len(buckets)), _y(v, top)) for i, v in enumerate(column)]
        out += _line(series, points, len(buckets))
        last = next((p for p in reversed(points) if p is not None), None)
        if last is not None:
            labels.append([last[1], series])
    out += _direct_labels(labels)
    out.append("</svg>")
    return "\n".join(out)


def figures(chart: Chart, buckets: Sequence[Any], *, subject: str = "all queues") -> Figures:
    """The same figures as the chart's, for a table beside it."""
    rows = [(_when(b.bucket_start),) + tuple(_cell(chart, getattr(b, s.column)) for s in chart.series)
            for b in buckets]
    headers = ("bucket start (UTC)",) + tuple(_series_name(chart, s) for s in chart.series)
    return Figures(f"{title(chart, buckets)}, {subject}: figures", headers, rows)


def describe(chart: Chart, buckets: Sequence[Any]) -> str:
    """One paragraph a screen reader says for the chart: the range and, per
    series, its total (per-bucket counts) or its highest and last figure."""
    if not buckets:
        return "No bucket in this range."
    span = f"{len(buckets)} bucket{'s' if len(buckets) != 1 else ''} from {_when(buckets[0].bucket_start)} " \
           f"to {_when(buckets[-1].bucket_start)} UTC"
    parts = [span]
    for series in chart.series:
        raw = [getattr(b, series.column) for b in buckets]
        known = [(i, _value(chart, v)) for i, v in enumerate(raw) if v is not None]
        name = _series_name(chart, series)
        if not known:
            parts.append(f"{name}: no figure")
            continue
        peak_at, peak = max(known, key=lambda item: item[1])
        highest = f"highest {_cell(chart, raw[peak_at])} at {_when(buckets[peak_at].bucket_start)}"
        missing = len(raw) - len(known)
        gaps = f", no figure in {missing} bucket{'s' if missing != 1 else ''}" if missing else ""
        if chart.totals:
            parts.append(f"{name}: {sum(v for _, v in known):,.0f} in all, {highest}{gaps}")
        else:
            parts.append(f"{name}: {highest}, last {_cell(chart, raw[known[-1][0]])}{gaps}")
    return ". ".join(parts) + "."


# Drawing ------------------------------------------------------------------------------------

def _plot_width() -> float:
    return WIDTH - LEFT - RIGHT


def _plot_height() -> float:
    return HEIGHT - TOP - BOTTOM


def _x(index: int, count: int) -> float:
    """The middle of the bucket's slot: one bucket sits in the middle."""
    return LEFT + (index + 0.5) * _plot_width() / count


def _y(value: float, top: float) -> float:
    return TOP + _plot_height() * (1 - value / top)


def _frame(chart: Chart, buckets: Sequence[Any], top: float, step: float) -> list[str]:
    bottom = TOP + _plot_height()
    right = LEFT + _plot_width()
    out = ['<g class="axes" font-size="11" fill="#5d6677">',
           f'<rect x="{LEFT}" y="{TOP}" width="{_plot_width()}" height="{_plot_height()}" fill="#ffffff"'
           ' stroke="#dde1e8"/>']
    ticks = int(round(top / step))
    for k in range(ticks + 1):
        value = k * step
        y = _y(value, top)
        if 0 < k:
            out.append(f'<line x1="{LEFT}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eef1f6"/>')
        out.append(f'<text class="y-label" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f'{escape(_axis_label(chart, value))}</text>')
    for index in _x_tick_indexes(len(buckets)):
        x = _x(index, len(buckets))
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 4}" stroke="#5d6677"/>')
        out.append(f'<text class="x-label" x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">'
                   f'{escape(_tick_time(buckets, index))}</text>')
    out.append(f'<text x="{right}" y="{HEIGHT - 4}" text-anchor="end">bucket start, UTC</text>')
    out.append("</g>")
    return out


def _x_tick_indexes(count: int) -> list[int]:
    if count == 0:
        return []
    if count <= X_TICKS:
        return list(range(count))
    return sorted({round(k * (count - 1) / (X_TICKS - 1)) for k in range(X_TICKS)})


def _legend(chart: Chart) -> list[str]:
    out = ['<g class="legend" font-size="12" fill="#1d2330">']
    x = LEFT
    for series in chart.series:
        y = 16
        out.append(f'<line x1="{x}" x2="{x + 28}" y1="{y}" y2="{y}" stroke="{series.colour}" stroke-width="2"'
                   f'{_dash(series)}/>')
        out.append(_marker(series, x + 14, y, "legend-marker"))
        out.append(f'<text x="{x + 34}" y="{y + 4}">{escape(_series_name(chart, series))}</text>')
        x += 48 + 7 * len(_series_name(chart, series))
    out.append("</g>")
    return out


def _line(series: Series, points: list[tuple[float, float] | None], count: int) -> list[str]:
    """A path with one subpath per run of known points (None breaks it: a gap),
    and markers on every point, or only on isolated ones when there are many."""
    runs: list[list[tuple[float, float]]] = []
    previous = None
    for point in points:
        if point is not None:
            if previous is None:
                runs.append([])
            runs[-1].append(point)
        previous = point
    out = [f'<g class="series" data-series={quoteattr(series.column)}>']
    if runs:
        d = " ".join("M" + " L".join(f"{x:.1f} {y:.1f}" for x, y in run) for run in runs)
        out.append(f'<path class="line" d="{d}" fill="none" stroke="{series.colour}" stroke-width="2"'
                   f' stroke-linejoin="round"{_dash(series)}/>')
    for run in runs:
        if count <= MARKER_LIMIT or len(run) == 1:
            out += [_marker(series, x, y, "marker") for x, y in run]
    out.append("</g>")
    return out


def _marker(series: Series, x: float, y: float, role: str) -> str:
    paint = f'fill="#ffffff" stroke="{series.colour}" stroke-width="1.5" class="{role}"'
    if series.marker == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.2" {paint}/>'
    if series.marker == "square":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" {paint}/>'
    if series.marker == "triangle":
        return f'<path d="M{x:.1f} {y - 4:.1f} L{x + 4:.1f} {y + 3:.1f} L{x - 4:.1f} {y + 3:.1f} Z" {paint}/>'
    return f'<path d="M{x:.1f} {y - 4:.1f} L{x + 4:.1f} {y:.1f} L{x:.1f} {y + 4:.1f} L{x - 4:.1f} {y:.1f} Z" {paint}/>'


def _direct_labels(labels: list[list]) -> list[str]:
    """Each series' name right of the plot at its last point's height, moved
    apart where two would overlap."""
    labels.sort(key=lambda item: item[0])
    for above, below in zip(labels, labels[1:]):
        below[0] = max(below[0], above[0] + LABEL_SPACING)
    overflow = labels[-1][0] - (TOP + _plot_height() + 4) if labels else 0
    out = ['<g class="direct-labels" font-size="12">']
    for y, series in labels:
        out.append(f'<text x="{LEFT + _plot_width() + 6}" y="{y - max(overflow, 0) + 4:.1f}"'
                   f' fill="{series.colour}" data-series={quoteattr(series.column)}>{escape(series.label)}</text>')
    out.append("</g>")
    return out


def _dash(series: Series) -> str:
    return f' stroke-dasharray="{series.dash}"' if series.dash else ""


# Scales and text ----------------------------------------------------------------------------

# Steps a duration axis moves by, in seconds: ones a reader counts in.
_DURATION_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30,
                   60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def _scale(chart: Chart, highest: float) -> tuple[float, float]:
    """(top of the axis, step between gridlines): at most four steps, the
    top at or above the highest figure; all zeros still get an axis."""
    wanted = highest / 4
    if chart.unit == "duration":
        step = next((s for s in _DURATION_STEPS if s >= wanted), None)
        if step is None:
            step = 86400 * _nice(wanted / 86400)
    else:
        step = max(1.0, _nice(wanted))
    return max(step, math.ceil(highest / step) * step), step


def _nice(value: float) -> float:
    """The least of 1, 2, 5 × 10^k at or above value (value > 0)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= value * (1 - 1e-12))


def _value(chart: Chart, raw: Any) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, timedelta):
        return raw.total_seconds()
    return float(raw)


def _cell(chart: Chart, raw: Any) -> str:
    if raw is None:
        return "—"
    if chart.unit == "duration":
        return duration_text(_value(chart, raw))
    return f"{int(raw):,}"


def _axis_label(chart: Chart, value: float) -> str:
    if chart.unit == "duration":
        return duration_text(value)
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.0f}"


def duration_text(seconds: float) -> str:
    """A duration in its largest whole unit, three significant digits: '120 ms', '1.5 min'."""
    if seconds == 0:
        return "0"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1000:.3g} ms"


def _series_name(chart: Chart, series: Series) -> str:
    return {"wait": "wait ", "run": "run "}.get(chart.name, "") + series.label


def title(chart: Chart, buckets: Sequence[Any]) -> str:
    """The chart's title, naming its bucket size ("Jobs per 15 minutes")."""
    return chart.title.format(bucket=_bucket_words(buckets))


def _bucket_words(buckets: Sequence[Any]) -> str:
    if len(buckets) < 2:
        return "bucket"
    minutes = round((buckets[1].bucket_start - buckets[0].bucket_start).total_seconds() / 60)
    if minutes % 1440 == 0:
        return "day" if minutes == 1440 else f"{minutes // 1440} days"
    if minutes % 60 == 0:
        return "hour" if minutes == 60 else f"{minutes // 60} hours"
    return "minute" if minutes == 1 else f"{minutes} minutes"


def _when(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")


def _tick_time(buckets: Sequence[Any], index: int) -> str:
    """HH:MM within a day's range, with the date beyond it."""
    span = buckets[-1].bucket_start - buckets[0].bucket_start
    moment = buckets[index].bucket_start.astimezone(timezone.utc)
    return moment.strftime("%H:%M" if span < timedelta(days=1) else "%m-%d %H:%M")


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:] + "."
