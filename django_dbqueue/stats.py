"""Queue health: the per-queue summary shared by the admin, ``dbqueue_stats`` and metrics.

Each summary is three queries: one grouped per state over the rows that can
matter (waiting, ready, running, blocked, and succeeded within the last hour),
each through its partial index, so its cost does not grow with the number of
old finished rows; the dead jobs per queue (``dead_jobs``, a read the admin's
filters share); and a read of the small table of paused queues. The load of
each concurrency limit (``limit_stats``) is one more query, through the two
partial indexes of limited jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    Count,
    DateTimeField,
    Exists,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Value,
)
from django.db.models.functions import TruncMinute
from django.utils import timezone

from django_dbqueue import clock, conf, dead_jobs, pauses
from django_dbqueue.models import Dependency, EdgeState, Job, JobState, QueuePause
from django_dbqueue.table_health import TableHealth

#: Leases ending within this window count as "expiring".
EXPIRING_WITHIN = timedelta(seconds=30)
#: How far back "succeeded in the last hour" and the throughput chart look.
RECENT = timedelta(hours=1)


@dataclass(frozen=True)
class QueueStats:
    """One queue's health. ``ready`` counts due jobs only; ``scheduled`` the ones not yet due.

    ``waiting``: jobs waiting for the jobs they depend on (never claimed until
    then). ``blocked``: jobs a failed dependency holds, that is ``cancelled``
    jobs with at least one ``failed`` edge (``blocked_jobs``): requeueing the
    dead dependency returns them to waiting. ``paused``: a pause is in force
    (``pauses``), so no worker claims the queue's jobs; ``paused_until``: when
    it ends by itself (``None``: paused until resumed, or not paused). These
    come last, with defaults, so the positional construction of earlier
    releases still works.
    """

    ready: int
    scheduled: int
    running: int
    expiring: int
    dead: int
    succeeded_last_hour: int
    oldest_ready_age_seconds: float | None
    waiting: int = 0
    blocked: int = 0
    paused: bool = False
    paused_until: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """Every field by name, ready for JSON: ``paused_until`` as ISO 8601 text in UTC."""
        fields = asdict(self)
        if self.paused_until is not None:
            fields["paused_until"] = clock.stamp(self.paused_until)
        return fields


def queue_stats(now: datetime | None = None) -> dict[str, QueueStats]:
    """Health of every queue with unfinished, dead, blocked or recently succeeded jobs, or
    paused, by name.

    Three queries. The jobs: a ``UNION ALL`` of one grouped branch per state,
    each served by that state's partial index (waiting and ready by index-only
    scans, recent successes by the finished-at index, blocked jobs by the
    failed-edge index and the cancelled-jobs index), so its cost follows the
    rows that matter, never the finished history. The dead jobs per queue
    (``dead_jobs.per_queue``: an index-only scan, shared with the admin's
    filters within ``dead_jobs.one_read``). The pauses in force
    (``pauses.in_force``, one row per paused queue), read where they are
    written, never from ``READ_DATABASE``: a pause shows the moment it commits.
    """
    now = now or timezone.now()
    alias = conf.get().reads_from
    jobs = Job.objects.using(alias)
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
        _branch(jobs.waiting(), waiting=Count("id")),
        _branch(blocked_jobs(jobs), blocked=Count("id")),
        _branch(
            jobs.succeeded().filter(finished_at__gte=now - RECENT),
            succeeded_last_hour=Count("id"),
        ),
    ]
    merged: dict[str, dict[str, Any]] = {}
    # order_by(): no model ordering on the union (Django 6.1 would order by a column it lacks).
    for row in branches[0].union(*branches[1:], all=True).order_by():
        counts = merged.setdefault(row["queue"], dict(IDLE))
        for name in COUNTED:
            counts[name] += row[name]
        counts["oldest_ready"] = counts["oldest_ready"] or row["oldest_ready"]
    for name, dead in dead_jobs.per_queue(alias).items():
        merged.setdefault(name, dict(IDLE))["dead"] = dead
    paused = {pause.queue: pause for pause in pauses.in_force()}
    return {
        name: _queue_stats(now, merged.get(name, IDLE), paused.get(name))
        for name in sorted(merged.keys() | paused.keys())
    }


#: The counted columns of every ``queue_stats`` branch, in the order the ``UNION`` needs.
COUNTED = (
    "waiting",
    "ready",
    "scheduled",
    "running",
    "expiring",
    "blocked",
    "succeeded_last_hour",
)
#: Where each queue's counts start, and those of a queue that is only paused.
IDLE: dict[str, Any] = {**dict.fromkeys(COUNTED, 0), "dead": 0, "oldest_ready": None}


def blocked_jobs(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """The jobs among ``jobs`` that a failed dependency holds: ``cancelled``, with a ``failed``
    edge (``Dependency.state``). Each counted once, however many of its edges failed. A
    requeue of the dead job at the start of their cascade returns them to waiting; those
    whose cascade started at a job an operator cancelled stay until ``DEAD_RETENTION``.

    The edges are read through the partial index ``dbqueue_dependency_failed``, the jobs
    through their primary key (or ``dbqueue_job_cancelled``): the cost follows the jobs
    held, never the history.
    """
    failed = Dependency.objects.filter(state=EdgeState.FAILED, job_id=OuterRef("pk"))
    held: QuerySet[Job] = jobs.filter(Exists(failed), state=JobState.CANCELLED)
    return held


def _branch(jobs: QuerySet[Job], **aggregates: Any) -> QuerySet[Job, dict[str, Any]]:
    """``jobs`` grouped by queue with every column of the union; those not given are 0."""
    columns = {name: aggregates.get(name, Value(0)) for name in COUNTED}
    oldest = aggregates.get("oldest_ready", Value(None, output_field=DateTimeField()))
    grouped: QuerySet[Job, dict[str, Any]] = (
        jobs.order_by().values("queue").annotate(**columns, oldest_ready=oldest)
    )
    return grouped


def _queue_stats(now: datetime, counts: dict[str, Any], pause: QueuePause | None) -> QueueStats:
    oldest = counts["oldest_ready"]
    return QueueStats(
        waiting=counts["waiting"],
        ready=counts["ready"],
        scheduled=counts["scheduled"],
        running=counts["running"],
        expiring=counts["expiring"],
        dead=counts["dead"],
        blocked=counts["blocked"],
        succeeded_last_hour=counts["succeeded_last_hour"],
        oldest_ready_age_seconds=(now - oldest).total_seconds() if oldest else None,
        paused=pause is not None,
        paused_until=None if pause is None else pause.until,
    )


@dataclass(frozen=True)
class LimitStats:
    """One limit's load: why its ready jobs may wait.

    ``limit``: the ``limit_key`` its jobs carry (``task:<task>``, ``queue:<queue>`` or
    ``key:<concurrency_key>``). ``size``: at most this many of its jobs run at once, and
    ``rate``: at most this many start a second (the largest ``limit_size`` and
    ``limit_rate`` among its ready and running jobs: jobs enqueued before the limit changed
    keep the ones they were enqueued with); ``None`` where the limit has none.
    ``running``: its jobs under a lease. ``waiting``: its ``ready`` jobs, due or not yet
    due; while ``running`` equals ``size`` (``full``) no worker claims them.
    """

    limit: str
    size: int | None
    rate: float | None
    running: int
    waiting: int

    @property
    def pace(self) -> str:
        """The rate as operators read it: ``"20/s"``, ``"0.5/s"``; ``"-"`` for none."""
        return "-" if self.rate is None else f"{self.rate:g}/s"

    @property
    def full(self) -> bool:
        """Whether every slot is taken: its ready jobs wait for one to free."""
        return self.size is not None and self.running >= self.size

    def as_dict(self) -> dict[str, Any]:
        """Every field by name, ready for JSON."""
        return asdict(self)


def limit_stats() -> list[LimitStats]:
    """The load of every limit with at least one ready or running job, by limit name (in code
    point order, the same on every database, whatever its collation).

    One grouped query on ``READ_DATABASE`` (like ``queue_stats``), over the ready and the
    running limited jobs only: on PostgreSQL through the partial indexes
    ``dbqueue_job_ready_limited`` and ``dbqueue_job_running_limited``, so its cost follows
    the limited jobs not yet finished, never the history. A limit whose jobs all finished
    is not listed.
    """
    ready, running = Q(state=JobState.READY), Q(state=JobState.RUNNING)
    rows = (
        Job.objects.using(conf.get().reads_from)
        # An OR, not state__in: PostgreSQL proves each arm against one partial index.
        .filter(ready | running, limit_key__isnull=False)
        .order_by()
        .values("limit_key")
        .annotate(
            size=Max("limit_size"),
            rate=Max("limit_rate"),
            running=Count("id", filter=running),
            waiting=Count("id", filter=ready),
        )
    )
    limits = [
        LimitStats(row["limit_key"], row["size"], row["rate"], row["running"], row["waiting"])
        for row in rows
    ]
    return sorted(limits, key=lambda limit: limit.limit)


def as_json(
    stats: dict[str, QueueStats],
    limits: Sequence[LimitStats] = (),
    table: TableHealth | None = None,
) -> dict[str, Any]:
    """The documented ``dbqueue_stats --json`` shape:
    ``{"queues": {name: {...}}, "limits": [{...}, ...], "table": {...}}``.

    Each queue: its counts, ``oldest_ready_age_seconds`` (``null``: none due),
    ``paused`` (``true``/``false``) and ``paused_until`` (ISO 8601 in UTC, such
    as ``"2025-03-01T14:05:00+00:00"``; ``null``: until resumed, or not paused).
    ``limits``: each limit of ``limits`` (``limit_stats()``), in their order, as
    ``{"limit", "size", "rate", "running", "waiting"}`` (``size`` and ``rate``: ``null``
    where the limit has none; ``rate`` in starts a second); always present, ``[]`` for none.
    ``table``: the job table's bloat signals (``TableHealth.as_dict``), ``null`` where
    they are not measured (MySQL, MariaDB, SQLite).
    """
    return {
        "queues": {name: queue.as_dict() for name, queue in stats.items()},
        "limits": [limit.as_dict() for limit in limits],
        "table": None if table is None else table.as_dict(),
    }


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
