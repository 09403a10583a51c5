"""Queue health: the per-queue summary shared by the admin, ``dbqueue_stats`` and metrics.

Each summary is one grouped query over the rows that can matter (active, dead,
and finished within the last hour), so its cost does not grow with the number
of queues or with old succeeded rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q
from django.db.models.functions import TruncMinute
from django.utils import timezone

from django_dbqueue import conf
from django_dbqueue.models import Job, JobState

#: Leases ending within this window count as "expiring".
EXPIRING_WITHIN = timedelta(seconds=30)
#: How far back "succeeded in the last hour" and the throughput chart look.
RECENT = timedelta(hours=1)


@dataclass(frozen=True)
class QueueStats:
    """One queue's health. ``ready`` counts due jobs only; ``scheduled`` the ones not yet due."""

    ready: int
    scheduled: int
    running: int
    expiring: int
    dead: int
    succeeded_last_hour: int
    oldest_ready_age_seconds: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def queue_stats(now: datetime | None = None) -> dict[str, QueueStats]:
    """Health of every queue with active, dead or recently succeeded jobs, by name."""
    now = now or timezone.now()
    ready = Q(state=JobState.READY)
    running = Q(state=JobState.RUNNING)
    recent_success = Q(state=JobState.SUCCEEDED, finished_at__gte=now - RECENT)
    rows = (
        Job.objects.using(conf.get().database)
        .filter(ready | running | Q(state=JobState.DEAD) | recent_success)
        .values("queue")
        .annotate(
            ready=Count("id", filter=ready & Q(run_at__lte=now)),
            scheduled=Count("id", filter=ready & Q(run_at__gt=now)),
            running=Count("id", filter=running),
            expiring=Count("id", filter=running & Q(lease_until__lte=now + EXPIRING_WITHIN)),
            dead=Count("id", filter=Q(state=JobState.DEAD)),
            succeeded_last_hour=Count("id", filter=recent_success),
            oldest_ready=Min("run_at", filter=ready & Q(run_at__lte=now)),
        )
        .order_by("queue")
    )
    return {
        row["queue"]: QueueStats(
            ready=row["ready"],
            scheduled=row["scheduled"],
            running=row["running"],
            expiring=row["expiring"],
            dead=row["dead"],
            succeeded_last_hour=row["succeeded_last_hour"],
            oldest_ready_age_seconds=(
                (now - row["oldest_ready"]).total_seconds() if row["oldest_ready"] else None
            ),
        )
        for row in rows
    }


def as_json(stats: dict[str, QueueStats]) -> dict[str, Any]:
    """The documented ``dbqueue_stats --json`` shape: ``{"queues": {name: {...}}}``."""
    return {"queues": {name: queue.as_dict() for name, queue in stats.items()}}


@dataclass(frozen=True)
class MinuteCount:
    """Jobs that finished in one minute with one outcome (``state``)."""

    minute: datetime
    state: str
    count: int


def window_start(now: datetime) -> datetime:
    """The first whole minute of the hour of minutes that ends with ``now``'s minute."""
    return now.replace(second=0, microsecond=0) - (RECENT - timedelta(minutes=1))


def finished_per_minute(now: datetime | None = None) -> list[MinuteCount]:
    """Jobs finished per whole minute of the last hour, by terminal state, oldest first."""
    now = now or timezone.now()
    rows = (
        Job.objects.using(conf.get().database)
        .filter(finished_at__gte=window_start(now), finished_at__lte=now)
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute", "state")
        .annotate(count=Count("id"))
        .order_by("minute", "state")
    )
    return [MinuteCount(row["minute"], row["state"], row["count"]) for row in rows]
