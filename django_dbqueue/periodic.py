"""Periodic (cron) jobs: ``@periodic("*/5 * * * *")`` stacked above ``@task``.

Every worker may enqueue every schedule, with no leader: a slot becomes a job
only in the transaction whose compare-and-set advances the schedule's
``PeriodicSlot`` row to that slot, so each slot is enqueued once across all
workers, even after its job row is purged.

Missed slots: after a time without workers only the latest missed slot is
enqueued. A schedule seen for the first time records its latest slot without
enqueueing it, so its first job is for the next slot (as cron would do).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from django.db import connections, transaction
from django.utils import timezone as django_timezone
from django.utils.module_loading import autodiscover_modules

from django_dbqueue import clock, conf
from django_dbqueue.arguments import encode_call
from django_dbqueue.exceptions import InvalidJob
from django_dbqueue.models import Job, PeriodicSlot
from django_dbqueue.tasks import Task
from django_dbqueue.validation import check_queue_name

log = logging.getLogger(__name__)

T = TypeVar("T", bound=Task[..., Any])

#: The longest a worker waits between two looks for due slots (it also never
#: waits longer than its poll interval).
TICK = 1.0
ONE_SECOND = timedelta(seconds=1)
#: croniter's optional seventh field: the year.
YEAR_FIELDS = 7

#: The schedules declared in this process, by task name.
REGISTRY: dict[str, Schedule] = {}


@dataclass(frozen=True)
class Schedule:
    """When to enqueue a task, and with which arguments, on which queue.

    ``queue=None`` means the task's own queue, else ``DEFAULT_QUEUE``. Cron
    times are wall-clock times in ``zone``: a time that a DST change skips
    runs at the first time after it, one that repeats runs at both.
    """

    task: Task[..., Any]
    cron: str
    zone: ZoneInfo
    queue: str | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def timezone_name(self) -> str:
        return self.zone.key

    def slot_at(self, now: datetime) -> datetime:
        """The latest cron time at or before the aware ``now``, in UTC."""
        # Cron times are whole seconds: "at or before now" is "before the next whole second".
        slot = self.cron_from(now.replace(microsecond=0) + ONE_SECOND).get_prev(datetime)
        # croniter's backward search can return a slot an hour early around a DST
        # fall-back; stepping forward from there is exact.
        while (following := self.next_after(slot)) <= now:
            slot = following
        return slot.astimezone(dt_timezone.utc)

    def next_after(self, moment: datetime) -> datetime:
        """The first cron time strictly after the aware ``moment``, in UTC."""
        return self.cron_from(moment).get_next(datetime).astimezone(dt_timezone.utc)

    def cron_from(self, moment: datetime) -> croniter[float]:
        return croniter(self.cron, moment.astimezone(self.zone))


def periodic(
    cron: str,
    *,
    queue: str | None = None,
    timezone: str = "UTC",
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
) -> Callable[[T], T]:
    """Enqueue the decorated task's job at every time ``cron`` names, in ``timezone``.

    Stack it above ``@task``. ``cron`` is croniter syntax: five fields, a sixth
    for seconds, ``@hourly`` and the like. Each job gets ``args`` and
    ``kwargs`` (JSON values) and goes to ``queue`` (default: the task's own).
    Everything is checked here, at import time: a bad expression, time zone,
    queue name or argument raises ``InvalidJob``, and so does a second,
    different schedule for the same task (one schedule per task).
    """

    def register(target: T) -> T:
        schedule = build_schedule(target, cron, timezone, queue, args, kwargs or {})
        existing = REGISTRY.get(schedule.name)
        # A module imported again declares the same schedule on a new Task object.
        if existing is not None and replace(existing, task=schedule.task) != schedule:
            raise InvalidJob(
                f"{schedule.name} already runs on {existing.cron!r}; a task takes one "
                "schedule. Declare another task for a second one."
            )
        REGISTRY[schedule.name] = schedule
        return target

    return register


def build_schedule(
    target: object,
    cron: object,
    zone: object,
    queue: str | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Schedule:
    """A validated ``Schedule``; raises ``InvalidJob`` naming what is wrong."""
    if not isinstance(target, Task):
        raise InvalidJob(
            f"@periodic needs a django_dbqueue task, not {target!r}: put @periodic(...) "
            "above @task."
        )
    if queue is not None:
        check_queue_name(queue)
    try:
        target.bind(args, dict(kwargs))
    except TypeError as exc:
        raise InvalidJob(
            f"@periodic on {target.name}: args and kwargs do not fit the function: {exc}."
        ) from exc
    encode_call(f"@periodic on {target.name}", list(args), dict(kwargs))
    return Schedule(
        target, check_cron(target, cron), parse_zone(target, zone), queue, tuple(args), dict(kwargs)
    )


def check_cron(target: Task[..., Any], cron: object) -> str:
    """``cron`` if croniter accepts it and it fires again and again, else ``InvalidJob``."""
    if not isinstance(cron, str):
        raise InvalidJob(f"@periodic on {target.name}: the cron expression must be a string.")
    if len(cron.split()) == YEAR_FIELDS:
        # A schedule that ends would leave workers with no slot to compute.
        raise InvalidJob(
            f"@periodic on {target.name}: {cron!r} has a year field; schedules have no end. "
            "Use five fields, or six with seconds last."
        )
    try:
        croniter(cron, datetime.now(dt_timezone.utc)).get_next(datetime)
    except CroniterError as exc:
        raise InvalidJob(
            f"@periodic on {target.name}: {cron!r} is not a cron expression that fires "
            f"({exc}). Use five fields, e.g. '*/5 * * * *', or six with seconds last."
        ) from exc
    return cron


def parse_zone(target: Task[..., Any], name: object) -> ZoneInfo:
    """The IANA time zone called ``name``, else ``InvalidJob``."""
    try:
        if not isinstance(name, str):
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidJob(
            f"@periodic on {target.name}: {name!r} is not a known time zone; use an IANA "
            "name such as 'UTC' or 'Europe/Paris'."
        ) from exc


def schedules() -> list[Schedule]:
    """The schedules declared so far in this process."""
    return list(REGISTRY.values())


def discover() -> list[Schedule]:
    """Import every installed app's ``tasks`` module, then return the declared schedules.

    An error raised while importing a ``tasks`` module propagates.
    """
    autodiscover_modules("tasks")
    return schedules()


class Scheduler:
    """Enqueues the due slots of ``schedules``; remembers which slots are settled.

    A slot is settled once this process saw the compare-and-set succeed or
    lose, so a look between two slots costs only the read of the database
    clock.
    """

    def __init__(self, schedules: Iterable[Schedule]) -> None:
        self.schedules = list(schedules)
        self.settled: dict[str, datetime] = {}

    def enqueue_due(self, now: datetime | None = None) -> list[Job]:
        """Enqueue each schedule's latest slot at or before ``now`` unless already done.

        ``now`` defaults to the database clock (one small query, none without
        schedules), so a worker whose clock is off neither fires a slot early
        nor skips one. Returns the jobs this call enqueued. A schedule whose
        job cannot be enqueued (``InvalidJob``, e.g. a queue not in
        ``QUEUES``) is logged and tried again at its next slot. Database
        errors propagate.
        """
        if not self.schedules:
            return []
        now = now or clock.database_now(connections[conf.get().database])
        if django_timezone.is_naive(now):
            raise ValueError(f"now must be an aware datetime, not {now!r}.")
        jobs = []
        for schedule in self.schedules:
            slot = schedule.slot_at(now)
            settled = self.settled.get(schedule.name)
            if settled is not None and slot <= settled:
                continue
            job = enqueue_or_log(schedule, slot)
            self.settled[schedule.name] = slot
            if job is not None:
                jobs.append(job)
        return jobs


def enqueue_due(now: datetime | None = None) -> list[Job]:
    """One round by hand: enqueue the due slot of every schedule ``discover()`` finds.

    See ``Scheduler.enqueue_due``; workers keep a ``Scheduler`` instead.
    """
    return Scheduler(discover()).enqueue_due(now)


def enqueue_or_log(schedule: Schedule, slot: datetime) -> Job | None:
    try:
        job = enqueue_slot(schedule, slot)
    except InvalidJob as exc:
        log.error("periodic task=%s slot=%s not enqueued: %s", schedule.name, slot.isoformat(), exc)
        return None
    if job is not None:
        log.info(
            "periodic task=%s slot=%s enqueued job id=%s%s",
            schedule.name,
            slot.isoformat(),
            job.pk,
            " (deduplicated)" if job.deduplicated else "",
            extra={"job_id": job.pk, "task": job.task, "queue": job.queue},
        )
    return job


def enqueue_slot(schedule: Schedule, slot: datetime) -> Job | None:
    """Enqueue ``schedule``'s job for ``slot`` unless a worker recorded this slot or a later one.

    One transaction on the queue's database: move the schedule's
    ``last_slot`` forward to ``slot`` only if it is earlier, and enqueue the
    job only when that update changed the row; when it changed nothing, make
    sure the row exists (a new row records ``slot`` and enqueues nothing).
    Concurrent callers wait on the row lock and then see the moved slot, so
    one of them enqueues. Returns the job, or ``None`` when nothing was
    enqueued. ``InvalidJob`` from the enqueue rolls the slot back.
    """
    alias = conf.get().database
    stored = to_epoch(slot)
    rows = PeriodicSlot.objects.using(alias)
    with transaction.atomic(using=alias):
        # The update comes first, so it takes the row's exclusive lock as its first lock.
        # Inserting first, InnoDB gives each caller a shared lock on the existing row (a
        # duplicate key), and two callers that then both want it exclusive deadlock.
        if not rows.filter(task=schedule.name, last_slot__lt=stored).update(last_slot=stored):
            rows.bulk_create(
                [PeriodicSlot(task=schedule.name, last_slot=stored)], ignore_conflicts=True
            )
            return None
        call = schedule.task.using(queue=schedule.queue, dedupe_key=f"periodic:{slot.isoformat()}")
        return call.enqueue(*schedule.args, **schedule.kwargs)


def recorded_slots(names: Iterable[str]) -> dict[str, datetime]:
    """The latest slot recorded for each of the named tasks that has one (aware, UTC)."""
    rows = PeriodicSlot.objects.using(conf.get().database).filter(task__in=list(names))
    return {row.task: row.slot for row in rows}


def to_epoch(slot: datetime) -> int:
    """The aware ``slot`` as ``PeriodicSlot.last_slot`` stores it: UTC epoch seconds."""
    return int(slot.timestamp())
