"""What the admin shows above the job list: queue health and a throughput chart."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_dbqueue import conf, stats
from django_dbqueue.models import JobState

CHART_MINUTES = int(stats.RECENT / timedelta(minutes=1))
CHART_WIDTH = 360
CHART_HEIGHT = 60
#: Stacking order and colours of the outcomes in the chart.
OUTCOME_COLOURS: dict[str, str] = {
    JobState.SUCCEEDED: "#2e7d32",
    JobState.DEAD: "#c62828",
    JobState.CANCELLED: "#9e9e9e",
}


@dataclass(frozen=True)
class QueueRow:
    """One queue's line in the health table; ``stale`` when its oldest ready job waits too long."""

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


def queue_rows(now: datetime) -> list[QueueRow]:
    warn_after = conf.get().oldest_ready_warning
    return [
        QueueRow(
            name,
            queue,
            stale=(queue.oldest_ready_age_seconds or 0) > warn_after,
        )
        for name, queue in stats.queue_stats(now).items()
    ]


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


def context(now: datetime | None = None) -> dict[str, Any]:
    """Template context for the health block above the job list."""
    now = now or timezone.now()
    bars, tallest = chart_bars(now)
    return {
        "queue_health": queue_rows(now),
        "oldest_ready_warning": conf.get().oldest_ready_warning,
        "chart_bars": bars,
        "chart_tallest": tallest,
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
        "chart_legend": [
            (JobState(state).label, colour) for state, colour in OUTCOME_COLOURS.items()
        ],
    }
