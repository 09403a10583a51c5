"""Operator triage: which jobs an operator means, walked in bounded batches.

The admin's actions and the ``dbqueue_requeue`` / ``dbqueue_cancel`` commands
select jobs here and hand each batch to the same lease-protocol functions the
workers use, so a selection of any size holds no long lock and builds no giant
list, and a job whose state changed meanwhile is skipped by the protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet

from django_dbqueue import conf
from django_dbqueue.models import EVERY_JOB, Job, JobQuerySet

#: Jobs one transition call handles; a selection runs batch after batch.
BATCH = 500
#: Ids a report names before it says how many more there are.
NAMED_IDS = 20


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
        # EVERY_JOB: --task and --queue read the operators' indexes (dbqueue_job_task, _queue).
        jobs: JobQuerySet = Job.objects.using(conf.get().database).filter(EVERY_JOB, **filters)
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


@contextmanager
def rolled_back_if(dry_run: bool) -> Iterator[None]:
    """With ``dry_run``, run the block in one transaction on the queue's database, then
    roll it back; without it, just run the block.

    A dry run thus takes the very path the real run takes (the same batches and
    protocol calls, each seeing what the ones before it did), so its report is
    the real run's, skips included. It holds the locks of what it touched until
    it ends; what the protocol logs or announces at commit never happens.
    """
    if not dry_run:
        yield
        return
    database = conf.get().database
    with transaction.atomic(using=database):
        yield
        transaction.set_rollback(True, using=database)
