"""The dashboard's charts (fenceq/dashboard/charts.py) without a database:
the SVG parsed with xml.etree, for what could go wrong in drawing: a point
too many or missing, a gap joined over, a value drawn off the plot, an
axis that does not reach the highest figure, labels that overlap, a series
told apart by colour alone, a title that is not the accessible name, text
that is not escaped; and the table beside each chart carries the same
figures."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import pytest

from fenceq.dashboard import charts
from fenceq.dashboard.charts import CHARTS, DEPTH, RUN, THROUGHPUT, WAIT

SVG = "{http://www.w3.org/2000/svg}"
START = datetime(2030, 1, 1, 9, 0, tzinfo=timezone.utc)
PLOT_TOP, PLOT_BOTTOM = charts.TOP, charts.HEIGHT - charts.BOTTOM


@dataclass(frozen=True)
class Bucket:
    """A row of activity()."""

    bucket_start: datetime
    submitted: int = 0
    claimed: int = 0
    retried: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    expired: int = 0
    pending: int | None = None
    due: int | None = None
    running: int | None = None
    wait_p50: timedelta | None = None
    wait_p95: timedelta | None = None
    run_p50: timedelta | None = None
    run_p95: timedelta | None = None


def buckets(count: int, step: timedelta = timedelta(minutes=1), **columns) -> list[Bucket]:
    """count buckets; each column given as a list of its figures, or one figure for all."""
    return [Bucket(START + i * step, **{name: (value[i] if isinstance(value, list) else value)
                                        for name, value in columns.items()}) for i in range(count)]


def parse(chart: charts.Chart, rows: list[Bucket], **kwargs) -> ET.Element:
    return ET.fromstring(charts.svg(chart, rows, chart_id="c1", **kwargs))


def runs_of(root: ET.Element, column: str) -> list[list[tuple[float, float]]]:
    """The series' line as its subpaths, each a list of (x, y)."""
    group = series_group(root, column)
    path = group.find(f"{SVG}path[@class='line']")
    if path is None:
        return []
    return [[tuple(map(float, pair.split())) for pair in sub.split(" L")]
            for sub in path.get("d").split("M")[1:]]


def series_group(root: ET.Element, column: str) -> ET.Element:
    return root.find(f"{SVG}g[@data-series='{column}']")


def markers(root: ET.Element, column: str) -> list[ET.Element]:
    return [e for e in series_group(root, column) if e.get("class") == "marker"]


def texts(root: ET.Element, css_class: str) -> list[str]:
    return [e.text for e in root.iter(f"{SVG}text") if e.get("class") == css_class]


def axis_top(root: ET.Element, chart: charts.Chart) -> str:
    return texts(root, "y-label")[-1]


def test_every_chart_is_an_image_named_by_its_title_and_described():
    for chart in CHARTS:
        root = parse(chart, buckets(3, submitted=[1, 2, 3], pending=4, wait_p50=timedelta(seconds=1)))
        assert root.get("role") == "img"
        title, desc = root.find(f"{SVG}title"), root.find(f"{SVG}desc")
        assert (root.get("aria-labelledby"), root.get("aria-describedby")) == (title.get("id"), desc.get("id"))
        assert title.get("id") == "c1-title" and "all queues" in title.text
        assert "3 buckets from 2030-01-01 09:00 to 2030-01-01 09:02 UTC" in desc.text


def test_no_bucket_draws_an_empty_frame_that_says_so():
    for chart in CHARTS:
        root = parse(chart, [])
        assert all(runs_of(root, s.column) == [] and markers(root, s.column) == [] for s in chart.series)
        assert texts(root, "no-data") == [chart.empty[0].upper() + chart.empty[1:] + "."]
        assert texts(root, "x-label") == [] and root.find(f"{SVG}desc").text == "No bucket in this range."
        assert charts.figures(chart, []).rows == []


def test_one_bucket_is_one_marked_point_in_the_middle():
    rows = buckets(1, submitted=7, completed=5, failed=1, retried=2)
    root = parse(THROUGHPUT, rows)
    middle = charts.LEFT + (charts.WIDTH - charts.LEFT - charts.RIGHT) / 2
    for series in THROUGHPUT.series:
        assert [len(run) for run in runs_of(root, series.column)] == [1]
        assert runs_of(root, series.column)[0][0][0] == pytest.approx(middle, abs=0.1)
        assert len(markers(root, series.column)) == 1
    assert texts(root, "x-label") == ["09:00"]
    assert "Jobs per bucket" in root.find(f"{SVG}title").text


def test_all_zeros_lie_on_the_bottom_of_an_axis_from_0_to_1():
    root = parse(THROUGHPUT, buckets(60))
    assert texts(root, "y-label") == ["0", "1"]
    for series in THROUGHPUT.series:
        (run,) = runs_of(root, series.column)
        assert len(run) == 60 and {y for _, y in run} == {PLOT_BOTTOM}
    assert texts(root, "no-data") == []
    assert "submitted: 0 in all" in root.find(f"{SVG}desc").text


def test_each_bucket_is_one_point_in_time_order_and_heights_keep_proportion():
    figures = [3, 0, 12, 7, 40, 1]
    root = parse(THROUGHPUT, buckets(6, submitted=figures))
    (run,) = runs_of(root, "submitted")
    xs = [x for x, _ in run]
    assert len(run) == 6 and xs == sorted(xs) and len(set(xs)) == 6
    top = float(axis_top(root, THROUGHPUT))
    assert top >= 40
    for (_, y), figure in zip(run, figures):
        assert PLOT_BOTTOM - y == pytest.approx((PLOT_BOTTOM - PLOT_TOP) * figure / top, abs=0.1)


def test_a_null_depth_breaks_the_line_and_an_isolated_point_keeps_a_marker():
    pending = [None, 5, 6, None, None, 9] + [None, 4] + [None] * 92  # 100 buckets: past MARKER_LIMIT
    root = parse(DEPTH, buckets(100, pending=pending, due=[None] * 100))
    assert [len(run) for run in runs_of(root, "pending")] == [2, 1, 1]
    assert len(markers(root, "pending")) == 2, "only the two isolated points, above MARKER_LIMIT"
    assert runs_of(root, "due") == [] and markers(root, "due") == []
    desc = root.find(f"{SVG}desc").text
    assert "pending: highest 9 at 2030-01-01 09:05, last 4, no figure in 96 buckets" in desc
    assert "due: no figure" in desc
    labels = [e.get("data-series") for e in root.iter(f"{SVG}text") if e.get("data-series")]
    assert labels == ["pending"], "a series with no figure gets no direct label"


def test_below_the_marker_limit_every_point_is_marked():
    root = parse(DEPTH, buckets(charts.MARKER_LIMIT, pending=list(range(charts.MARKER_LIMIT)), due=1))
    assert len(markers(root, "pending")) == len(markers(root, "due")) == charts.MARKER_LIMIT


def test_large_values_stay_on_the_plot_with_short_axis_labels():
    huge = [2_000_000_000, 1, 987_654_321, 0]
    root = parse(THROUGHPUT, buckets(4, submitted=huge, completed=huge[::-1]))
    labels = texts(root, "y-label")
    assert labels[0] == "0" and labels[-1] == "2G" and all(len(label) <= 5 for label in labels)
    for series in ("submitted", "completed"):
        (run,) = runs_of(root, series)
        assert all(PLOT_TOP <= y <= PLOT_BOTTOM for _, y in run)
    assert min(y for _, y in runs_of(root, "submitted")[0]) == PLOT_TOP
    assert charts.figures(THROUGHPUT, buckets(1, submitted=2_000_000_000)).rows[0][1] == "2,000,000,000"
    assert "submitted: 2,987,654,322 in all" in root.find(f"{SVG}desc").text


def test_durations_are_read_on_an_axis_of_durations():
    p50 = [timedelta(milliseconds=120), None, timedelta(seconds=2)]
    p95 = [timedelta(milliseconds=900), None, timedelta(seconds=75)]
    root = parse(WAIT, buckets(3, wait_p50=p50, wait_p95=p95))
    labels = texts(root, "y-label")
    assert labels == ["0", "30 s", "1 min", "1.5 min"], "steps of 30 s up to the 75 s p95"
    low, high = runs_of(root, "wait_p50"), runs_of(root, "wait_p95")
    assert [len(r) for r in low] == [len(r) for r in high] == [1, 1]
    assert all(b[0][1] < a[0][1] for a, b in zip(low, high)), "p95 drawn above p50"
    assert charts.figures(WAIT, buckets(3, wait_p50=p50)).rows[0][1:] == ("120 ms", "—")


def test_no_finished_job_says_so_instead_of_an_empty_plot():
    root = parse(RUN, buckets(60))
    assert texts(root, "no-data") == ["No job completed or failed in this range."]
    assert all(runs_of(root, s.column) == [] for s in RUN.series)


def test_series_differ_in_dash_and_marker_not_only_colour_and_the_legend_shows_both():
    for chart in CHARTS:
        assert len({s.dash for s in chart.series}) == len(chart.series)
        assert len({s.marker for s in chart.series}) == len(chart.series)
        root = parse(chart, buckets(2, submitted=1, pending=1, wait_p50=timedelta(1), run_p50=timedelta(1)))
        legend = root.find(f"{SVG}g[@class='legend']")
        dashes = [line.get("stroke-dasharray") for line in legend.iter(f"{SVG}line")]
        assert dashes == [s.dash or None for s in chart.series]
        assert len([e for e in legend if e.get("class") == "legend-marker"]) == len(chart.series)


def test_direct_labels_of_series_ending_together_do_not_overlap():
    root = parse(THROUGHPUT, buckets(5, submitted=3, completed=3, failed=3, retried=3))
    ys = sorted(float(e.get("y")) for e in root.iter(f"{SVG}text") if e.get("data-series"))
    assert len(ys) == 4 and all(b - a >= charts.LABEL_SPACING - 0.01 for a, b in zip(ys, ys[1:]))
    assert ys[-1] <= charts.HEIGHT


def test_time_labels_show_the_date_once_the_range_passes_a_day():
    hour = parse(THROUGHPUT, buckets(60))
    assert texts(hour, "x-label") == ["09:00", "09:12", "09:24", "09:35", "09:47", "09:59"]
    week = parse(THROUGHPUT, buckets(168, step=timedelta(hours=1)))
    labels = texts(week, "x-label")
    assert len(labels) == charts.X_TICKS and labels[0] == "01-01 09:00" and labels[-1] == "01-08 08:00"
    assert "Jobs per hour" in week.find(f"{SVG}title").text
    assert "Jobs per 15 minutes" in parse(THROUGHPUT, buckets(3, step=timedelta(minutes=15))).find(
        f"{SVG}title").text


def test_the_subject_is_escaped():
    text = charts.svg(DEPTH, buckets(2, pending=1), chart_id="q", subject='queue <a href="x">&co')
    root = ET.fromstring(text)  # parses: nothing unescaped
    assert root.find(f"{SVG}title").text == 'Backlog when sampled, queue <a href="x">&co'
    assert "<a " not in text


def test_the_table_carries_the_charts_figures():
    rows = buckets(3, submitted=[1, 2000, 3], completed=[0, 5, None], pending=[None, 4, 1])
    table = charts.figures(THROUGHPUT, rows, subject="queue work")
    assert table.headers == ("bucket start (UTC)", "submitted", "completed", "failed", "retried")
    assert table.rows[1] == ("2030-01-01 09:01", "2,000", "5", "0", "0")
    assert table.rows[2][2] == "—"
    assert table.caption == "Jobs per minute, queue work: figures"
    depth = charts.figures(DEPTH, rows)
    assert [row[1] for row in depth.rows] == ["—", "4", "1"]
    assert charts.figures(RUN, [replace(rows[0], run_p95=timedelta(hours=3))]).rows[0][2] == "3 h"
