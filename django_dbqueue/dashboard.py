"""What the admin shows above the job list: queue health, a throughput chart, periodic schedules.

Below the queues, the limits with ready or running jobs (``stats.limit_stats``): each
limit's size and rate, running jobs and ready jobs waiting on it. The health table also says
which queues are paused, and offers (to users who may
change jobs) a Pause or Resume button per queue; ``PauseForm`` and ``QueueForm``
check what those buttons post, ``paused_message`` says what a pause did.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.utils import formats, timezone

from django_dbqueue import clock, conf, periodic, stats, validation
from django_dbqueue.models import JobState, QueuePause

CHART_MINUTES = int(stats.RECENT / timedelta(minutes=1))
CHART_WIDTH = 360
CHART_HEIGHT = 60
#: Room around the bars for the count axis (left) and the time axis (below).
AXIS_LEFT = 40
AXIS_TOP = 8
AXIS_BOTTOM = 18
#: Minutes between two labels of the time axis.
TIME_TICK_MINUTES = 15
#: How long a due slot may go unrecorded before its schedule is flagged: no worker is scheduling.
SCHEDULE_OVERDUE_AFTER = timedelta(minutes=1)
#: Stacking order and colours of the outcomes in the chart.
OUTCOME_COLOURS: dict[str, str] = {
    JobState.SUCCEEDED: "#2e7d32",
    JobState.DEAD: "#c62828",
    JobState.CANCELLED: "#9e9e9e",
}

#: How long the health table's Pause button pauses a queue: ``(seconds, label)``, and
#: ``""`` for until resumed (the first, the default).
PAUSE_PERIODS = (
    ("", "until resumed"),
    ("600", "for 10 minutes"),
    ("3600", "for 1 hour"),
    ("86400", "for 1 day"),
)
#: How the health table and its messages show the time a pause ends, in the current time zone.
PAUSE_END_FORMAT = "Y-m-d H:i:s T"


class QueueForm(forms.Form):
    """What the Resume button posts: the queue's name, checked as ``pauses`` checks it."""

    queue = forms.CharField()

    def clean_queue(self) -> str:
        queue = self.cleaned_data["queue"]
        if not validation.is_queue_name(queue):
            raise forms.ValidationError(
                f"Queue name {queue!r} is invalid: {validation.QUEUE_NAME_RULE}."
            )
        return queue


class PauseForm(QueueForm):
    """What the Pause button posts: the queue, and one of ``PAUSE_PERIODS`` (``None``: until
    resumed). Any other period is refused."""

    period = forms.TypedChoiceField(
        choices=PAUSE_PERIODS, coerce=int, empty_value=None, required=False
    )


def paused_message(pause: QueuePause) -> str:
    """What the admin says once ``pause`` is written."""
    if pause.until is None:
        ends = "you resume it"
    else:
        ends = formats.date_format(timezone.localtime(clock.as_utc(pause.until)), PAUSE_END_FORMAT)
    return f"Queue {pause.queue} paused: workers claim none of its jobs until {ends}."


@dataclass(frozen=True)
class QueueRow:
    """One queue's line in the health table; ``stale`` when its oldest ready job waits too long
    although the queue is not paused (a pause is why its jobs wait, not a missing worker)."""

    name: str
    stats: stats.QueueStats
    stale: bool


@dataclass(frozen=True)
class Bar:
    """One rectangle of the chart: ``count`` jobs of ``state`` in one minute."""

    x: float
    y: float
    width: float
    height: float
    state: str
    count: int
    minute: datetime

    @property
    def colour(self) -> str:
        return OUTCOME_COLOURS.get(self.state, "#616161")


@dataclass(frozen=True)
class Tick:
    """One labelled mark on an axis, ``position`` pixels along it inside the plot."""

    position: float
    label: str


@dataclass(frozen=True)
class LegendEntry:
    """One outcome in the chart's legend, with its total over the hour shown."""

    label: str
    colour: str
    total: int


@dataclass(frozen=True)
class ScheduleRow:
    """One periodic schedule: its latest recorded slot (``None``: no worker saw it yet), next run.

    ``overdue`` when a slot older than ``SCHEDULE_OVERDUE_AFTER`` was never recorded.
    """

    schedule: periodic.Schedule
    queue: str
    last_slot: datetime | None
    next_run: datetime
    overdue: bool


def queue_rows(now: datetime) -> list[QueueRow]:
    warn_after = conf.get().oldest_ready_warning
    return [
        QueueRow(
            name,
            queue,
            stale=not queue.paused and (queue.oldest_ready_age_seconds or 0) > warn_after,
        )
        for name, queue in stats.queue_stats(now).items()
    ]


def schedule_rows(now: datetime) -> list[ScheduleRow]:
    """The periodic schedules declared in the project's ``tasks`` modules, by task name."""
    schedules = sorted(periodic.discover(), key=lambda schedule: schedule.name)
    if not schedules:
        return []
    recorded = periodic.recorded_slots(schedule.name for schedule in schedules)
    default_queue = conf.get().default_queue
    rows = []
    for schedule in schedules:
        last = recorded.get(schedule.name)
        rows.append(
            ScheduleRow(
                schedule,
                queue=schedule.queue or schedule.task.options.queue or default_queue,
                last_slot=last,
                next_run=schedule.next_after(now),
                overdue=last is None or last < schedule.slot_at(now - SCHEDULE_OVERDUE_AFTER),
            )
        )
    return rows


def chart_bars(now: datetime) -> tuple[list[Bar], int]:
    """Stacked bars of jobs finished per minute over the last hour, and the tallest total."""
    counts = stats.finished_per_minute(now)
    start = stats.window_start(now)
    totals: dict[datetime, int] = {}
    for row in counts:
        totals[row.minute] = totals.get(row.minute, 0) + row.count
    tallest = max(totals.values(), default=0)
    if not tallest:
        return [], 0
    width = CHART_WIDTH / CHART_MINUTES
    stacked: dict[datetime, float] = {}
    bars = []
    for row in sorted(counts, key=lambda r: (r.minute, list(OUTCOME_COLOURS).index(r.state))):
        column = (row.minute - start) // timedelta(minutes=1)
        height = CHART_HEIGHT * row.count / tallest
        below = stacked.get(row.minute, 0.0)
        stacked[row.minute] = below + height
        bars.append(
            Bar(
                x=column * width,
                y=CHART_HEIGHT - below - height,
                width=max(width - 1, 1),
                height=height,
                state=row.state,
                count=row.count,
                minute=row.minute,
            )
        )
    return bars, tallest


def time_ticks(now: datetime) -> list[Tick]:
    """Marks at each quarter hour of the chart's window, labelled in the current time zone."""
    start = stats.window_start(now)
    width = CHART_WIDTH / CHART_MINUTES
    ticks = []
    for column in range(CHART_MINUTES):
        minute = start + timedelta(minutes=column)
        if timezone.localtime(minute).minute % TIME_TICK_MINUTES == 0:
            ticks.append(Tick(column * width, f"{timezone.localtime(minute):%H:%M}"))
    return ticks


def count_ticks(tallest: int) -> list[Tick]:
    """0 at the bottom and the tallest minute's total at the top (and half of it between)."""
    if not tallest:
        return []
    ticks = [Tick(CHART_HEIGHT, "0"), Tick(0, str(tallest))]
    if tallest >= 4:
        ticks.insert(1, Tick(CHART_HEIGHT / 2, f"{tallest / 2:g}"))
    return ticks


def legend(bars: list[Bar]) -> list[LegendEntry]:
    """Every outcome with its colour and how many jobs ended so in the hour charted."""
    totals = dict.fromkeys(OUTCOME_COLOURS, 0)
    for bar in bars:
        totals[bar.state] = totals.get(bar.state, 0) + bar.count
    return [
        LegendEntry(JobState(state).label, OUTCOME_COLOURS[state], total)
        for state, total in totals.items()
    ]


def context(now: datetime | None = None) -> dict[str, Any]:
    """Template context for the health block above the job list."""
    now = now or timezone.now()
    bars, tallest = chart_bars(now)
    return {
        "queue_health": queue_rows(now),
        "limit_health": stats.limit_stats(),
        "periodic_schedules": schedule_rows(now),
        "oldest_ready_warning": conf.get().oldest_ready_warning,
        "pause_periods": PAUSE_PERIODS,
        "pause_end_format": PAUSE_END_FORMAT,
        "chart_bars": bars,
        "chart_tallest": tallest,
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
        "chart_svg_width": AXIS_LEFT + CHART_WIDTH + 8,
        "chart_svg_height": AXIS_TOP + CHART_HEIGHT + AXIS_BOTTOM,
        "chart_axis_left": AXIS_LEFT,
        "chart_axis_top": AXIS_TOP,
        "chart_time_ticks": time_ticks(now),
        "chart_count_ticks": count_ticks(tallest),
        "chart_legend": legend(bars),
    }
