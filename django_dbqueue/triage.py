"""Operator triage: which jobs an operator means, walked in bounded batches.

The admin's actions and the ``dbqueue_requeue`` / ``dbqueue_cancel`` commands
select jobs here and hand each batch to the same lease-protocol functions the
workers use, so a selection of any size holds no long lock and builds no giant
list, and a job whose state changed meanwhile is skipped by the protocol.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from django_dbqueue import conf
from django_dbqueue.models import Job, JobQuerySet

#: Jobs one transition call handles; a selection runs batch after batch.
BATCH = 500
#: Ids a report names before it says how many more there are.
NAMED_IDS = 20
#: ``--since`` as an age: a number and a unit (seconds, minutes, hours, days).
AGE = re.compile(r"(\d{1,9})([smhd])")
AGE_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


@dataclass(frozen=True)
class Selector:
    """The command-line selectors; each given one narrows the selection (AND).

    ``since`` applies to the field the caller names: when a dead job died
    (``finished_at``) for requeue, when a job was enqueued (``created_at``)
    for cancel.
    """

    ids: tuple[int, ...] = ()
    task: str | None = None
    queue: str | None = None
    error_code: str | None = None
    since: datetime | None = None

    def is_empty(self) -> bool:
        return not self.ids and not any(
            value is not None for value in (self.task, self.queue, self.error_code, self.since)
        )

    def jobs(self, since_field: str) -> JobQuerySet:
        """The jobs matching every given selector, on the queue's database."""
        given = {
            "pk__in": self.ids or None,
            "task": self.task,
            "queue": self.queue,
            "last_error_code": self.error_code,
            f"{since_field}__gte": self.since,
        }
        filters = {lookup: value for lookup, value in given.items() if value is not None}
        jobs: JobQuerySet = Job.objects.using(conf.get().database).filter(**filters)
        return jobs


def batches(queryset: QuerySet[Job], size: int) -> Iterator[list[Job]]:
    """The jobs of ``queryset`` in id order, ``size`` at a time (keyset pages: no OFFSET).

    Only ``pk``, ``task`` and ``state`` are loaded: enough to name a job in a log.
    """
    page = queryset.order_by("pk").only("pk", "task", "state")
    last = 0
    while batch := list(page.filter(pk__gt=last)[:size]):
        yield batch
        last = batch[-1].pk


def id_batches(queryset: QuerySet[Job], size: int) -> Iterator[list[int]]:
    """``batches`` as lists of ids."""
    for batch in batches(queryset, size):
        yield [job.pk for job in batch]


def named(ids: Iterable[int]) -> str:
    """``"3, 5, 8"``, or the first ``NAMED_IDS`` ids and how many more there are."""
    listed = sorted(ids)
    text = ", ".join(map(str, listed[:NAMED_IDS]))
    if len(listed) > NAMED_IDS:
        text += f" and {len(listed) - NAMED_IDS} more"
    return text


def parse_ids(text: str) -> list[int]:
    """``"3,5, 8"`` -> ``[3, 5, 8]``; anything else is an argparse error naming the value."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of job ids; write them as 12,15,20."
        ) from None
    if not ids or any(job_id < 1 for job_id in ids):
        raise argparse.ArgumentTypeError(f"{text!r}: job ids are positive whole numbers.")
    return ids


def parse_since(text: str) -> datetime:
    """An age (``90s``, ``30m``, ``2h``, ``7d``: that long ago) or an ISO date/time.

    A time without a zone is read in the current time zone. Anything else is
    an argparse error that shows both forms.
    """
    age = AGE.fullmatch(text.strip())
    if age:
        return timezone.now() - timedelta(**{AGE_UNITS[age.group(2)]: int(age.group(1))})
    try:
        moment = parse_datetime(text.strip())
        day = None if moment else parse_date(text.strip())
    except ValueError:
        moment = day = None
    if day is not None:
        moment = datetime(day.year, day.month, day.day)
    if moment is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an age nor a date: write 30m, 2h, 7d, or 2025-06-01T09:00."
        )
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment
