"""Paused queues: no worker claims a paused queue's jobs, on any host, until it resumes.

A pause is one row of ``dbqueue_queue_pause`` (``QueuePause``) per queue,
written by ``pause`` (``dbqueue_pause``, the admin's queue summary) and read
by every claim statement (``sql/<vendor>.sql``, ``claim``). Guarantee: every
job of a paused queue that starts has ``started_at`` before the pause
committed, so no claim made after ``pause`` returned takes one. The claim
reads its clock for ``started_at`` first, then checks the pauses with a view
of the database taken after that reading (PostgreSQL: the function
``dbqueue_paused_queues``, migration 0017; MySQL/MariaDB: the claim's last
statement); a claim that missed the pause's commit read its clock before it.
SQLite claims under the database write lock. Jobs already running finish;
eager mode (``claim_jobs``) runs what its commit enqueued, paused or not.

Free when unused: with no pause, the PostgreSQL claim's plan is the one it had
before, plus one call of that function, which reads an empty table.

A pause with ``seconds`` ends by itself then: from that moment the claim
ignores it, idle workers wake for it as for a job's ``run_at`` (``next_due``),
and the reaper deletes the row (``sweep``). ``resume`` ends pauses at once and
wakes idle workers (PostgreSQL ``NOTIFY``; elsewhere their next poll).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Q

from django_dbqueue import conf, durations, jsontext, leases, sql, validation
from django_dbqueue.models import QueuePause, UtcNow

#: The longest ``paused_by`` kept (the column's length); a longer one is cut.
ACTOR_MAX = 150


def pause(
    queues: Sequence[str], *, seconds: float | None = None, actor: str = ""
) -> list[QueuePause]:
    """Pause ``queues`` from this call's commit on (inside a caller's transaction: from
    that one's), until ``resume`` or, with ``seconds``, until that long from now by the
    database clock. A queue paused already takes the new ``until`` and ``actor``.

    Returns the pauses written, by queue name. ``ValueError`` for a bad queue
    name, ``seconds`` or ``actor`` (text no database stores: NUL, a surrogate),
    before anything is written; an ``actor`` past ``ACTOR_MAX`` characters is
    cut. A queue need not have jobs (yet) to be paused.
    """
    names = _queue_names(queues)
    if seconds is not None and not durations.is_seconds(seconds):
        raise ValueError(f"A pause lasts {durations.rule()}, not {seconds!r}.")
    if not isinstance(actor, str) or jsontext.unstorable(actor):
        raise ValueError(f"actor must be text a database stores, not {actor!r}.")
    rows = sql.run_alone(
        leases.queue_connection(),
        "pause_queues",
        {"queues": names, "seconds": seconds, "actor": actor[:ACTOR_MAX]},
    )
    return sorted((_pause(row) for row in rows), key=lambda found: found.queue)


def resume(queues: Sequence[str] | None = None) -> list[str]:
    """End the pauses of ``queues`` (``None``: every paused queue) at once; the names of the
    queues that were paused, sorted. Idle workers listening for wake-ups claim at the commit."""
    names = None if queues is None else _queue_names(queues)
    rows = sql.run_alone(
        leases.queue_connection(),
        "resume_queues",
        {"queues": names, "channel": conf.get().notify_channel},
    )
    return sorted(str(row["queue"]) for row in rows)


def in_force() -> list[QueuePause]:
    """The pauses in force now (by the database clock), by queue name."""
    return list(
        QueuePause.objects.using(conf.get().database)
        .filter(Q(until__isnull=True) | Q(until__gt=UtcNow()))
        .order_by("queue")
    )


def sweep() -> int:
    """Delete the pauses whose ``until`` has passed (the reaper's); how many. A pause renewed
    meanwhile is kept: the delete reads each row's newest version under its lock."""
    ended = QueuePause.objects.using(conf.get().database).filter(until__lte=UtcNow())
    deleted: int = ended.delete()[0]
    return deleted


def _queue_names(queues: Sequence[str]) -> list[str]:
    if isinstance(queues, str):
        raise ValueError(f"Pass a list of queue names, not the text {queues!r}.")
    given = list(queues)
    if not given:
        raise ValueError("Name at least one queue.")
    for name in given:
        if not validation.is_queue_name(name):
            raise ValueError(f"Queue name {name!r} is invalid: {validation.QUEUE_NAME_RULE}.")
    return sorted(set(given))


def _pause(row: sql.Row) -> QueuePause:
    until = row["until"]
    return QueuePause(
        queue=row["queue"],
        paused_at=sql.to_datetime(row["paused_at"]),
        until=None if until is None else sql.to_datetime(until),
        paused_by=row["paused_by"],
    )
