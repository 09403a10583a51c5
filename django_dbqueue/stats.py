"""Queue health: the per-queue summary shared by the admin, ``dbqueue_stats`` and metrics.

Each summary is one query, grouped per state over the rows that can matter
(ready, running, dead, and succeeded within the last hour), each state through
its index, so its cost does not grow with the number of old finished rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, DateTimeField, Min, Q, QuerySet, Value
from django.db.models.functions import TruncMinute
from django.utils import timezone

from django_dbqueue import conf
from django_dbqueue.models import Job

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
    """Health of every queue with active, dead or recently succeeded jobs, by name.

    One query: a ``UNION ALL`` of one grouped branch per state, each served by
    that state's partial index (ready and dead by index-only scans, recent
    successes by the finished-at index), so its cost follows the rows that
    matter, never the finished history.
    """
    now = now or timezone.now()
    jobs = Job.objects.using(conf.get().reads_from)
    due = Q(run_at__lte=now)
    branches = [
        _branch(
            jobs.ready(),
            ready=Count("id", filter=due),
            scheduled=Count("id", filter=~due),
            oldest_ready=Min("run_at", filter=due),
        ),
        _branch(
            jobs.running(),
            running=Count("id"),
            expiring=Count("id", filter=Q(lease_until__lte=now + EXPIRING_WITHIN)),
        ),
        _branch(jobs.dead(), dead=Count("id")),
        _branch(
            jobs.succeeded().filter(finished_at__gte=now - RECENT),
            succeeded_last_hour=Count("id"),
        ),
    ]
    merged: dict[str, dict[str, Any]] = {}
    # order_by(): no model ordering on the union (Django 6.1 would order by a column it lacks).
    for row in branches[0].union(*branches[1:], all=True).order_by():
        counts = merged.setdefault(row["queue"], dict.fromkeys(COUNTED, 0))
        for name in COUNTED:
            counts[name] += row[name]
        counts["oldest_ready"] = counts.get("oldest_ready") or row["oldest_ready"]
    return {name: _queue_stats(now, merged[name]) for name in sorted(merged)}


#: The counted columns of every ``queue_stats`` branch, in the order the ``UNION`` needs.
COUNTED = ("ready", "scheduled", "running", "expiring", "dead", "succeeded_last_hour")


def _branch(jobs: QuerySet[Job], **aggregates: Any) -> QuerySet[Job, dict[str, Any]]:
    """``jobs`` grouped by queue with every column of the union; those not given are 0."""
    columns = {name: aggregates.get(name, Value(0)) for name in COUNTED}
    oldest = aggregates.get("oldest_ready", Value(None, output_field=DateTimeField()))
    grouped: QuerySet[Job, dict[str, Any]] = (
        jobs.order_by().values("queue").annotate(**columns, oldest_ready=oldest)
    )
    return grouped


def _queue_stats(now: datetime, counts: dict[str, Any]) -> QueueStats:
    oldest = counts["oldest_ready"]
    return QueueStats(
        ready=counts["ready"],
        scheduled=counts["scheduled"],
        running=counts["running"],
        expiring=counts["expiring"],
        dead=counts["dead"],
        succeeded_last_hour=counts["succeeded_last_hour"],
        oldest_ready_age_seconds=(now - oldest).total_seconds() if oldest else None,
    )


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
        Job.objects.using(conf.get().reads_from)
        .filter(finished_at__gte=window_start(now), finished_at__lte=now)
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute", "state")
        .annotate(count=Count("id"))
        .order_by("minute", "state")
    )
    return [MinuteCount(row["minute"], row["state"], row["count"]) for row in rows]
