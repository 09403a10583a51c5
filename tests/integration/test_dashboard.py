"""Queue health above the job list: per-queue counts, stale warning, throughput chart."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from html import unescape
from html.parser import HTMLParser
from itertools import pairwise
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries, Settings

from django_dbqueue import dashboard, stats
from django_dbqueue.models import Dependency, EdgeState, Job, JobState
from tests.factories import JobFactory

CHANGELIST = "/admin/django_dbqueue/job/"
#: The health table's columns, in order.
COLUMNS = (
    "queue",
    "waiting",
    "ready",
    "scheduled",
    "running",
    "expiring",
    "dead",
    "blocked",
    "succeeded",
    "oldest ready",
)
OLDEST = COLUMNS.index("oldest ready")
#: The chart's clock in the geometry tests: half a minute past noon.
NOON = datetime(2025, 3, 1, 12, 0, 30, tzinfo=dt_timezone.utc)

pytestmark = pytest.mark.django_db


def job(**fields: Any) -> Job:
    return JobFactory(**fields)  # type: ignore[no-any-return]


@dataclass
class HealthRow:
    classes: list[str]
    cells: list[str] = field(default_factory=list)


@dataclass
class Rect:
    attrs: dict[str, str]
    title: str = ""


class HealthPage(HTMLParser):
    """The health table's queue rows and the throughput chart's bars, from the page HTML."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[HealthRow] = []
        self.rects: list[Rect] = []
        self._in_cell = False
        self._in_svg = False
        self._in_title = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        classes = values.get("class", "").split()
        if tag == "tr" and "dbqueue-queue" in classes:
            self.rows.append(HealthRow(classes))
        elif tag == "td" and self.rows and len(self.rows[-1].cells) < len(COLUMNS):
            self._in_cell = True
            self.rows[-1].cells.append("")
        elif tag == "svg" and values.get("id") == "dbqueue-throughput":
            self._in_svg = True
        elif tag == "rect" and self._in_svg:
            self.rects.append(Rect(values))
        elif tag == "title" and self._in_svg:
            self._in_title = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_cell = False
        elif tag == "svg":
            self._in_svg = False
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_cell:
            self.rows[-1].cells[-1] += data.strip()
        elif self._in_title:
            self.rects[-1].title += data

    def row(self, queue: str) -> HealthRow:
        (found,) = [row for row in self.rows if row.cells[0] == queue]
        return found


def health_page(client: Client) -> HealthPage:
    response = client.get(CHANGELIST)
    assert response.status_code == 200
    return HealthPage(response.content.decode())


def age_seconds(cell: str) -> int:
    """The oldest-ready cell reads ``90s`` (plus a warning when stale)."""
    return int(cell.split("s", 1)[0])


# --- health table ----------------------------------------------------------------------------


class TestHealthTable:
    def test_one_row_per_queue_with_its_counts(self, admin_client: Client) -> None:
        now = timezone.now()
        job(queue="mail", run_at=now - timedelta(seconds=90))
        job(queue="mail", run_at=now - timedelta(seconds=10))
        job(queue="mail", run_at=now + timedelta(hours=1))
        job(queue="mail", running=True, lease_until=now + timedelta(seconds=10))
        job(queue="mail", running=True, lease_until=now + timedelta(minutes=5))
        dead = job(queue="mail", dead=True)
        job(queue="mail", cancelled=True)
        job(queue="mail", state=JobState.WAITING, pending_dependencies=1)
        held = job(queue="mail", cancelled=True)
        Dependency.objects.create(
            job=held, depends_on=dead, position=0, on_failure="cancel", state=EdgeState.FAILED
        )
        JobFactory.create_batch(
            2, queue="mail", succeeded=True, finished_at=now - timedelta(minutes=10)
        )
        job(queue="mail", succeeded=True, finished_at=now - timedelta(hours=2))
        job(queue="default", run_at=now - timedelta(seconds=5))
        job(queue="archive", succeeded=True, finished_at=now - timedelta(hours=2))

        page = health_page(admin_client)

        assert [row.cells[0] for row in page.rows] == ["default", "mail"]
        mail = page.row("mail").cells
        assert mail[1:OLDEST] == ["1", "2", "1", "2", "1", "1", "1", "2"]
        assert 90 <= age_seconds(mail[OLDEST]) < 150
        default = page.row("default").cells
        assert default[1:OLDEST] == ["0", "1", "0", "0", "0", "0", "0", "0"]
        assert 5 <= age_seconds(default[OLDEST]) < 65

    def test_queue_without_due_jobs_shows_no_oldest_ready_age(self, admin_client: Client) -> None:
        job(queue="mail", run_at=timezone.now() + timedelta(minutes=5))
        job(queue="mail", dead=True)
        assert health_page(admin_client).row("mail").cells[1:] == [
            "0",
            "0",
            "1",
            "0",
            "0",
            "1",
            "0",
            "0",
            "-",
        ]

    @pytest.mark.parametrize(
        ("warning", "waiting", "stale"),
        [
            (60, timedelta(minutes=5), True),
            (60, timedelta(seconds=30), False),
            (None, timedelta(minutes=6), True),
            (None, timedelta(minutes=4), False),
        ],
        ids=["past-setting", "within-setting", "past-default-300s", "within-default-300s"],
    )
    def test_stale_warning_when_the_oldest_ready_job_waits_past_the_threshold(
        self,
        admin_client: Client,
        settings: Settings,
        warning: int | None,
        waiting: timedelta,
        stale: bool,
    ) -> None:
        if warning is not None:
            settings.DBQUEUE = {"OLDEST_READY_WARNING": warning}
        job(queue="mail", run_at=timezone.now() - waiting)
        job(queue="mail", run_at=timezone.now() + timedelta(hours=1))
        row = health_page(admin_client).row("mail")
        assert ("dbqueue-stale" in row.classes) is stale
        threshold = warning or 300
        assert (f"\u26a0 older than {threshold}s" in row.cells[OLDEST]) is stale

    def test_summary_is_three_queries_whatever_the_number_of_queues(
        self, django_assert_num_queries: DjangoAssertNumQueries
    ) -> None:
        for queue in ("default", "mail", "reports", "exports"):
            job(queue=queue)
            job(queue=queue, running=True)
            job(queue=queue, dead=True)
        with django_assert_num_queries(3):  # the jobs grouped, the dead jobs, the pauses
            summary = stats.queue_stats()
        assert sorted(summary) == ["default", "exports", "mail", "reports"]


# --- throughput chart ------------------------------------------------------------------------


class TestThroughputChart:
    def test_one_rect_per_minute_and_outcome_in_the_last_hour(self, admin_client: Client) -> None:
        now = timezone.now()
        ten_ago, thirty_ago, forty_ago = (now - timedelta(minutes=m) for m in (10, 30, 40))
        JobFactory.create_batch(2, succeeded=True, finished_at=ten_ago)
        job(dead=True, finished_at=ten_ago)
        job(succeeded=True, finished_at=thirty_ago)
        job(cancelled=True, finished_at=forty_ago)
        job(succeeded=True, finished_at=now - timedelta(minutes=61))
        job(dead=True, finished_at=now - timedelta(hours=2))

        rects = health_page(admin_client).rects

        def title(at: datetime, outcome: str, count: int) -> str:
            return f"{at:%H:%M} {outcome}: {count}"

        assert sorted(rect.title for rect in rects) == sorted(
            [
                title(ten_ago, "succeeded", 2),
                title(ten_ago, "dead", 1),
                title(thirty_ago, "succeeded", 1),
                title(forty_ago, "cancelled", 1),
            ]
        )
        for rect in rects:
            outcome = rect.title.split()[1].rstrip(":")
            assert rect.attrs["fill"] == dashboard.OUTCOME_COLOURS[outcome]

    def test_no_rect_when_nothing_finished_in_the_last_hour(self, admin_client: Client) -> None:
        job(succeeded=True, finished_at=timezone.now() - timedelta(hours=2))
        job()
        page = health_page(admin_client)
        assert page.rects == []
        assert [row.cells[0] for row in page.rows] == ["default"]


def finished(at: datetime, count: int = 1, **traits: bool) -> None:
    JobFactory.create_batch(count, finished_at=at, **(traits or {"succeeded": True}))


def assert_inside_chart(bars: list[dashboard.Bar]) -> None:
    for bar in bars:
        assert bar.x >= 0, bar
        assert bar.x + bar.width <= dashboard.CHART_WIDTH, bar
        assert bar.y >= 0, bar
        assert bar.y + bar.height <= dashboard.CHART_HEIGHT + 1e-9, bar
        assert bar.height > 0, bar


class TestChartBars:
    def test_bars_stay_inside_the_chart_and_the_tallest_minute_is_full_height(self) -> None:
        first_column = NOON.replace(second=0) - timedelta(minutes=dashboard.CHART_MINUTES - 1)
        finished(first_column + timedelta(seconds=5))
        finished(NOON - timedelta(minutes=30), count=3)
        finished(NOON - timedelta(minutes=30), dead=True)
        finished(NOON - timedelta(minutes=15))
        finished(NOON - timedelta(seconds=20), count=2, dead=True)

        bars, tallest = dashboard.chart_bars(NOON)

        assert tallest == 4
        assert len(bars) == 5
        assert_inside_chart(bars)
        by_minute: dict[datetime, list[dashboard.Bar]] = defaultdict(list)
        for bar in bars:
            by_minute[bar.minute].append(bar)
        peak = by_minute[datetime(2025, 3, 1, 11, 30, tzinfo=dt_timezone.utc)]
        assert sum(bar.height for bar in peak) == pytest.approx(dashboard.CHART_HEIGHT)
        assert min(bar.y for bar in peak) == pytest.approx(0)
        (single,) = by_minute[datetime(2025, 3, 1, 11, 45, tzinfo=dt_timezone.utc)]
        assert single.height == pytest.approx(dashboard.CHART_HEIGHT / 4)
        assert min(bar.x for bar in bars) == 0
        assert max(bar.x for bar in bars) == pytest.approx(
            dashboard.CHART_WIDTH * (dashboard.CHART_MINUTES - 1) / dashboard.CHART_MINUTES
        )

    def test_stacked_outcomes_of_one_minute_do_not_overlap(self) -> None:
        finished(NOON - timedelta(minutes=5), count=2)
        finished(NOON - timedelta(minutes=5), dead=True)
        finished(NOON - timedelta(minutes=5), cancelled=True)
        bars, tallest = dashboard.chart_bars(NOON)
        assert tallest == 4
        stack = sorted(bars, key=lambda bar: bar.y, reverse=True)
        assert [bar.state for bar in stack] == ["succeeded", "dead", "cancelled"]
        assert stack[0].y + stack[0].height == pytest.approx(dashboard.CHART_HEIGHT)
        for lower, upper in pairwise(stack):
            assert upper.y + upper.height == pytest.approx(lower.y)

    def test_job_finished_just_under_an_hour_ago_stays_inside_the_chart(self) -> None:
        finished(NOON - timedelta(minutes=59, seconds=45))
        finished(NOON)
        bars, _ = dashboard.chart_bars(NOON)
        assert_inside_chart(bars)

    def test_nothing_finished_means_no_bars(self) -> None:
        finished(NOON - timedelta(hours=2))
        assert dashboard.chart_bars(NOON) == ([], 0)


# --- look: links, axes, legend ---------------------------------------------------------------


class TestLinksAxesAndLegend:
    def test_each_count_links_to_the_list_filtered_by_its_state_and_queue(
        self, admin_client: Client
    ) -> None:
        mail_dead = [job(queue="mail", dead=True) for _ in range(2)]
        job(queue="default", dead=True)
        job(queue="mail")
        html = admin_client.get(CHANGELIST).content.decode()
        row = re.search(r'<tr class="dbqueue-queue">\s*<td><a[^>]*>mail</a>.*?</tr>', html, re.S)
        assert row is not None
        links = re.findall(r'<a href="([^"]+)"[^>]*>(\d+)</a>', row.group())
        base = CHANGELIST
        assert [href for href, _ in links] == [
            f"{base}?state__exact=waiting&amp;queue__exact=mail",
            f"{base}?state__exact=ready&amp;queue__exact=mail",
            f"{base}?state__exact=ready&amp;queue__exact=mail",
            f"{base}?state__exact=running&amp;queue__exact=mail",
            f"{base}?state__exact=running&amp;queue__exact=mail",
            f"{base}?state__exact=dead&amp;queue__exact=mail",
            f"{base}?blocked=yes&amp;queue__exact=mail",
            f"{base}?state__exact=succeeded&amp;queue__exact=mail",
        ]
        dead_href = unescape(links[5][0])
        listed = admin_client.get(dead_href).context["cl"].result_list
        assert {j.pk for j in listed} == {j.pk for j in mail_dead}

    def test_the_chart_has_a_count_axis_a_time_axis_and_a_legend_with_totals(
        self, admin_client: Client
    ) -> None:
        now = timezone.now()
        JobFactory.create_batch(4, succeeded=True, finished_at=now - timedelta(minutes=5))
        job(dead=True, finished_at=now - timedelta(minutes=5))
        job(dead=True, finished_at=now - timedelta(minutes=20))
        html = admin_client.get(CHANGELIST).content.decode()
        count_axis = re.search(r'<g class="dbqueue-axis-count">(.*?)</g>', html, re.S)
        time_axis = re.search(r'<g class="dbqueue-axis-time"[^>]*>(.*?)</g>', html, re.S)
        assert count_axis is not None
        assert time_axis is not None
        assert re.findall(r"<text[^>]*>([^<]+)</text>", count_axis.group(1)) == ["0", "2.5", "5"]
        labels = re.findall(r"<text[^>]*>([^<]+)</text>", time_axis.group(1))
        assert len(labels) == 4
        assert all(re.fullmatch(r"\d\d:(00|15|30|45)", label) for label in labels), labels
        legend = re.search(r'<p id="dbqueue-legend">(.*?)</p>', html, re.S)
        assert legend is not None
        assert re.sub(r"<[^>]+>|&#9632;|&middot;", "", legend.group(1)).split() == [
            "Succeeded:",
            "4",
            "Dead:",
            "2",
            "Cancelled:",
            "0",
        ]

    def test_time_ticks_fall_on_quarter_hours_inside_the_chart(self) -> None:
        ticks = dashboard.time_ticks(NOON)
        assert [tick.label for tick in ticks] == ["11:15", "11:30", "11:45", "12:00"]
        assert all(0 <= tick.position < dashboard.CHART_WIDTH for tick in ticks)
        assert list(pairwise(tick.position for tick in ticks)) == [
            (a, a + 15 * dashboard.CHART_WIDTH / dashboard.CHART_MINUTES)
            for a in [tick.position for tick in ticks][:-1]
        ]
