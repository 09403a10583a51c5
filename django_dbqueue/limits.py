"""Global limits: the one limit a job counts against, its size and its rate.

A limit is a name (``Job.limit_key``) with a size N (``limit_size``: at most N
of its jobs are ``running`` at once), a rate (``limit_rate``: at most so many
of its jobs start per second), or both, across every worker of every host. A
job counts against at most one limit, fixed when it is enqueued:

- ``key:<concurrency_key>``, for a job enqueued ``using(concurrency_key=...)``:
  sized and paced by the task's ``concurrency`` and ``rate``, else by
  ``DBQUEUE["KEY_CONCURRENCY"]`` and ``["KEY_RATE"]``;
- ``task:<task>``, for a task declared ``@task(concurrency=N, rate="R")``;
- ``queue:<queue>``, for a queue in ``DBQUEUE["QUEUE_CONCURRENCY"]`` or
  ``["QUEUE_RATE"]``.

A job under two of them (a task with a limit enqueued to a queue that has one,
a key in such a queue) or under a limit and a ``serial_key`` (a limit of 1 with
an order of its own) is refused with ``InvalidJob``: the claim would honour one
and break the other. Size and rate are the ones in force at enqueue: a changed
setting applies to jobs enqueued after it.

The claim enforces both (``sql/<vendor>.sql``, ``claim``): a job whose limit is
full, or whose rate has no start left, stays ``ready``, skipped, not awaited. A
slot frees when the job leaves ``running`` by any path, since the claim counts
the running jobs themselves. A rate is a GCRA (a token bucket kept as one time,
``RateBucket.due_at``) holding ``burst(rate)`` starts: in any ``T`` seconds at
most ``burst + rate * T`` jobs of the limit start, and no more than the rate
over the long run; an idle claimer wakes when the next start is due.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import NamedTuple

from django.db import connections

from django_dbqueue import clock, conf
from django_dbqueue.exceptions import InvalidJob
from django_dbqueue.models import RateBucket
from django_dbqueue.validation import check_int, is_whole

TASK = "task:"
QUEUE = "queue:"
KEY = "key:"

#: A rate as written: ``100/m`` (100 starts a minute), ``5/s``, ``1000/h``, ``20/10s``.
RATE = re.compile(r"(\d+)\s*/\s*(\d*)\s*([smhd])")
RATE_RULE = (
    "a rate is N/s, N/m, N/h or N/d (N starts per second, minute, hour or day), or N/10s "
    "(each number a whole number from 1 to 2147483647)"
)
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: How long after its due time the reaper keeps a limit's pace (``RateBucket``): a row
#: past its due time admits what no row would, so this only keeps the claims' clocks,
#: which may lag the reaper's by a moment, from pacing against a deleted row.
BUCKET_KEPT = timedelta(hours=1)
#: A rate's bucket holds 1/BURST_DIVISOR of a second of its starts (at least one): how far
#: a late claim may catch up, and the burst a fresh limit allows. ``dbqueue_limit_room``
#: (migration 0019) and each vendor's claim apply the same rule.
BURST_DIVISOR = 10


class Limit(NamedTuple):
    """A job's limit: ``key`` (``Job.limit_key``), ``size`` and ``rate`` (starts per
    second); ``key`` is ``None`` for none, and one of the others is set otherwise."""

    key: str | None = None
    size: int | None = None
    rate: float | None = None


NONE = Limit()


def check_size(name: str, value: object) -> int:
    """``value`` if it is a limit's size (a whole number from 1), else ``InvalidJob``."""
    return check_int(name, value, 1)


def parse_rate(name: str, text: object) -> float:
    """The starts per second ``text`` (``"100/m"``) allows, else ``InvalidJob`` naming ``name``."""
    found = RATE.fullmatch(text.strip()) if isinstance(text, str) else None
    count, every, unit = found.groups() if found else ("0", "", "s")
    if not (is_whole(int(count), 1) and is_whole(int(every or 1), 1)):
        raise InvalidJob(f"{name} must be a rate, not {text!r}: {RATE_RULE}.")
    return int(count) / (int(every or 1) * UNIT_SECONDS[unit])


def is_rate(text: object) -> bool:
    """Whether ``text`` is a rate ``parse_rate`` reads."""
    try:
        parse_rate("rate", text)
    except InvalidJob:
        return False
    return True


def burst(rate: float) -> int:
    """The starts a limit of ``rate`` per second allows at once: a tenth of a second's
    worth, at least one."""
    return max(1, math.floor(rate / BURST_DIVISOR))


def of_task(
    task: str,
    concurrency: int | None,
    rate: str | None,
    queue: str,
    cfg: conf.QueueSettings,
) -> Limit:
    """The limit a job of ``task`` (declared with ``concurrency`` and ``rate``) in ``queue``
    counts against. Raises ``InvalidJob`` when the task and the queue both have one.
    """
    queue_limit = Limit(
        f"{QUEUE}{queue}",
        cfg.queue_concurrency.get(queue),
        _rate_setting("QUEUE_RATE", cfg.queue_rate.get(queue)),
    )
    queue_limited = queue_limit.size is not None or queue_limit.rate is not None
    if concurrency is None and rate is None:
        return queue_limit if queue_limited else NONE
    if queue_limited:
        raise InvalidJob(
            f"Task {task} has a limit and queue {queue!r} has one in DBQUEUE "
            "(QUEUE_CONCURRENCY, QUEUE_RATE): a job counts against one limit. "
            "Enqueue it to another queue, or drop one of the two."
        )
    return Limit(f"{TASK}{task}", concurrency, None if rate is None else parse_rate("rate", rate))


def keyed(limit: Limit, key: str, cfg: conf.QueueSettings) -> Limit:
    """The limit of a job enqueued with ``concurrency_key=key`` whose task and queue give
    ``limit`` (``of_task``): ``key``'s, sized and paced as the task's limit, or else by
    ``KEY_CONCURRENCY`` and ``KEY_RATE``. Raises ``InvalidJob`` when neither applies or
    the queue has a limit.
    """
    if limit.key is not None and limit.key.startswith(QUEUE):
        raise InvalidJob(
            f"concurrency_key {key!r} in queue {limit.key.removeprefix(QUEUE)!r}, which has a "
            "limit in DBQUEUE (QUEUE_CONCURRENCY, QUEUE_RATE): a job counts against one limit."
        )
    if limit.key is None:
        limit = Limit(key, cfg.key_concurrency, _rate_setting("KEY_RATE", cfg.key_rate))
        if limit.size is None and limit.rate is None:
            raise InvalidJob(
                f"concurrency_key {key!r} needs a limit: declare the task with "
                "@task(concurrency=N) or rate=..., or set DBQUEUE['KEY_CONCURRENCY'] or "
                "['KEY_RATE']."
            )
    return limit._replace(key=f"{KEY}{key}")


def _rate_setting(name: str, text: str | None) -> float | None:
    """A rate setting's starts per second (the system checks vouched for its form)."""
    return None if text is None else parse_rate(f"DBQUEUE[{name!r}]", text)


def check_serial(limit: Limit, serial_key: str | None) -> None:
    """Raise ``InvalidJob`` for a job with both a limit and a ``serial_key``."""
    if limit.key is not None and serial_key is not None:
        raise InvalidJob(
            f"serial_key {serial_key!r} with the concurrency limit {limit.key!r}: a serial key "
            "runs its jobs one at a time already, and a job counts against one limit."
        )


def sweep() -> int:
    """Delete the paces (``RateBucket``) whose due time passed ``BUCKET_KEPT`` ago (the
    reaper's); how many. Keeps the table at the limits paced lately."""
    database = conf.get().database
    before = clock.database_now(connections[database]) - BUCKET_KEPT
    deleted: int = RateBucket.objects.using(database).filter(due_at__lt=before).delete()[0]
    return deleted
