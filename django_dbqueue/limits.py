"""Global concurrency limits: the one limit a job counts against, and its size.

A limit is a name and a size N: at most N jobs with that name (``Job.limit_key``)
are ``running`` at once, across every worker of every host. A job counts
against at most one limit, fixed when it is enqueued:

- ``key:<concurrency_key>``, for a job enqueued ``using(concurrency_key=...)``:
  its size is the task's ``concurrency``, else ``DBQUEUE["KEY_CONCURRENCY"]``;
- ``task:<task>``, for a task declared ``@task(concurrency=N)``;
- ``queue:<queue>``, for a queue in ``DBQUEUE["QUEUE_CONCURRENCY"]``.

A job under two of them (a task with a ``concurrency`` enqueued to a queue that
has one, a key in such a queue) or under a limit and a ``serial_key`` (a limit
of 1 with an order of its own) is refused with ``InvalidJob``: the claim would
honour one and break the other. The size is the one in force at enqueue: a
changed setting applies to jobs enqueued after it.

The claim enforces it (``sql/<vendor>.sql``, ``claim``): a job whose limit is
full stays ``ready``, skipped, not awaited; a slot frees when the job leaves
``running`` by any path, since the claim counts the running jobs themselves.
"""

from __future__ import annotations

from typing import NamedTuple

from django_dbqueue import conf
from django_dbqueue.exceptions import InvalidJob
from django_dbqueue.validation import check_int

TASK = "task:"
QUEUE = "queue:"
KEY = "key:"


class Limit(NamedTuple):
    """A job's limit: ``key`` (``Job.limit_key``) and ``size``; both ``None`` for none."""

    key: str | None = None
    size: int | None = None


NONE = Limit()


def check_size(name: str, value: object) -> int:
    """``value`` if it is a limit's size (a whole number from 1), else ``InvalidJob``."""
    return check_int(name, value, 1)


def of_task(task: str, concurrency: int | None, queue: str, cfg: conf.QueueSettings) -> Limit:
    """The limit a job of ``task`` (declared with ``concurrency``) in ``queue`` counts against.

    Raises ``InvalidJob`` when the task and the queue both have one.
    """
    queue_size = cfg.queue_concurrency.get(queue)
    if concurrency is None:
        return NONE if queue_size is None else Limit(f"{QUEUE}{queue}", queue_size)
    if queue_size is not None:
        raise InvalidJob(
            f"Task {task} has concurrency={concurrency} and queue {queue!r} has "
            f"DBQUEUE['QUEUE_CONCURRENCY'] {queue_size}: a job counts against one limit. "
            "Enqueue it to another queue, or drop one of the two."
        )
    return Limit(f"{TASK}{task}", concurrency)


def keyed(limit: Limit, key: str, cfg: conf.QueueSettings) -> Limit:
    """The limit of a job enqueued with ``concurrency_key=key`` whose task and queue give
    ``limit`` (``of_task``): ``key``'s, sized by the task's ``concurrency`` or else
    ``KEY_CONCURRENCY``. Raises ``InvalidJob`` when no size applies or the queue has a limit.
    """
    if limit.key is not None and limit.key.startswith(QUEUE):
        raise InvalidJob(
            f"concurrency_key {key!r} in queue {limit.key.removeprefix(QUEUE)!r}, which has "
            f"DBQUEUE['QUEUE_CONCURRENCY'] {limit.size}: a job counts against one limit."
        )
    size = limit.size if limit.key is not None else cfg.key_concurrency
    if size is None:
        raise InvalidJob(
            f"concurrency_key {key!r} needs a size: declare the task with "
            "@task(concurrency=N) or set DBQUEUE['KEY_CONCURRENCY']."
        )
    return Limit(f"{KEY}{key}", size)


def check_serial(limit: Limit, serial_key: str | None) -> None:
    """Raise ``InvalidJob`` for a job with both a limit and a ``serial_key``."""
    if limit.key is not None and serial_key is not None:
        raise InvalidJob(
            f"serial_key {serial_key!r} with the concurrency limit {limit.key!r}: a serial key "
            "runs its jobs one at a time already, and a job counts against one limit."
        )
