"""The lease protocol: one function per transition, each one short transaction.

A claim gives a worker a time-limited lease on a job and a fencing token
(``lease_token``, +1 per claim). ``renew``, ``complete``, ``fail`` and
``release`` count only for the current ``(worker_id, lease_token)`` while the
lease is live by the database clock, checked after the row lock is held.
Otherwise they change nothing and report the lost lease: a stale worker can
never overwrite a newer attempt's outcome. They never raise for a lost lease;
the caller logs it and never retries the write.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from django_dbqueue import conf, jsontext, runnable, sql
from django_dbqueue.errors import CANCELLED, LEASE_EXPIRED, ErrorInfo, appended, history_entry
from django_dbqueue.models import Job, JobState
from django_dbqueue.tasks import TaskNotFound

log = logging.getLogger(__name__)

#: Jobs the reaper handles in one transaction.
REAP_BATCH = 100

#: Runs of the requeue statement before a dedupe-key conflict with concurrent writers is raised.
REQUEUE_TRIES = 3

#: Rotates which queue goes first when a claim serves several.
_turns = itertools.count()


@dataclass(frozen=True)
class Lease:
    """A worker's claim on one job: what to run and the token that proves ownership.

    ``attempt`` is 1-based and equals the job's ``attempts`` after the claim.
    """

    job_id: int
    lease_token: int
    worker_id: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    attempt: int
    max_attempts: int
    lease_until: datetime
    lease_seconds: int
    queue: str
    #: The ``django.tasks`` backend alias for jobs enqueued through it, else ``None``.
    backend: str | None = None

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts and requeues (see ``Job.idempotency_key``)."""
        return f"dbqueue-job-{self.job_id}"


@dataclass(frozen=True)
class ReapResult:
    """What one ``reap`` did: jobs made ready again, and jobs now dead."""

    retried: list[int]
    dead: list[int]


class ResultNotSerializable(ValueError):
    """``complete()`` was given a result that is not JSON; nothing was written."""


def queue_connection() -> BaseDatabaseWrapper:
    """The connection to the database holding the jobs (``DBQUEUE['DATABASE']``)."""
    return connections[conf.get().database]


def claim(queues: Sequence[str] | None, worker_id: str, limit: int) -> list[Lease]:
    """Lease up to ``limit`` due ready jobs of ``queues`` (``None``: every queue).

    Highest priority first, then oldest ``run_at``, within each queue; the
    batch is shared across queues in turn so a busy queue cannot starve
    another, and comes back in priority order. Rows locked by other
    transactions are skipped, never awaited (PostgreSQL), so concurrent
    claimers never receive the same job; on SQLite the claim holds the
    database write lock. Each claimed job's ``attempts`` and ``lease_token``
    grow by one.
    """
    if limit < 1:
        return []
    connection = queue_connection()
    params = {
        "queues": list(queues) if queues is not None else None,
        "worker_id": worker_id,
        "limit": limit,
        "turn": next(_turns) % 1024,
    }
    rows = sql.run_alone(connection, "claim", params)
    # RETURNING has no order: hand the batch back in priority order.
    rows.sort(key=lambda row: (-row[10], sql.to_datetime(row[11]), row[0]))
    return [
        Lease(
            job_id=row[0],
            lease_token=row[1],
            worker_id=worker_id,
            task=row[2],
            args=sql.to_json(row[3]),
            kwargs=sql.to_json(row[4]),
            attempt=row[5],
            max_attempts=row[6],
            lease_until=sql.to_datetime(row[7]),
            lease_seconds=row[8],
            queue=row[9],
            backend=row[12],
        )
        for row in rows
    ]


@dataclass(frozen=True)
class Renewal:
    """What one ``renew_report`` learnt: the job ids still owned, and those asked to stop.

    ``cancel_requested`` is a subset of ``owned``: jobs an operator marked
    with ``request_cancel``.
    """

    owned: set[int]
    cancel_requested: set[int]


def renew(leases: Iterable[Lease]) -> set[int]:
    """Extend every lease still owned by its job's ``lease_seconds``; return their job ids.

    All leases go in one statement. A lease missing from the result is lost:
    the job was reaped, re-claimed or finished. Stop working on it.
    """
    return renew_report(leases).owned


def renew_report(leases: Iterable[Lease]) -> Renewal:
    """``renew``, also reporting which owned jobs an operator asked to stop.

    The cancel mark comes back in the renew statement itself: no extra query.
    """
    held = list(leases)
    if not held:
        return Renewal(owned=set(), cancel_requested=set())
    batch = [
        {"job_id": lease.job_id, "lease_token": lease.lease_token, "worker_id": lease.worker_id}
        for lease in held
    ]
    rows = sql.run_alone(queue_connection(), "renew", {"leases": batch})
    owned = {row[0] for row in rows}
    for lease in held:
        if lease.job_id not in owned:
            log_lost_lease("renew", lease.job_id, lease.worker_id, lease.lease_token)
    return Renewal(owned=owned, cancel_requested={row[0] for row in rows if row[1] is not None})


def complete(lease: Lease, result: object) -> bool:
    """Mark the leased job ``succeeded`` and store its JSON ``result``.

    Returns ``False`` and changes nothing when the lease is lost. Raises
    ``ResultNotSerializable`` (writing nothing) when ``result`` is not JSON.
    """
    return lease.job_id in complete_many([(lease, encode_result(lease, result))])


def complete_many(done: Sequence[tuple[Lease, str | None]]) -> set[int]:
    """Complete several leased jobs in one statement; return the ids completed.

    ``done`` pairs each lease with its result as JSON text (``encode_result``).
    Every row keeps its own fencing check: a job whose lease is lost is left
    as it is, logged, and missing from the result.
    """
    if not done:
        return set()
    rows = [
        {
            "job_id": lease.job_id,
            "lease_token": lease.lease_token,
            "worker_id": lease.worker_id,
            "result": encoded,
        }
        for lease, encoded in done
    ]
    completed = {row[0] for row in sql.run_alone(queue_connection(), "complete", {"rows": rows})}
    for lease, _ in done:
        if lease.job_id not in completed:
            log_lost_lease("complete", lease.job_id, lease.worker_id, lease.lease_token)
    return completed


def encode_result(lease: Lease, result: object) -> str | None:
    """``result`` as stored: JSON text, or ``None`` (SQL NULL, as Django's JSONField stores it).

    Raises ``ResultNotSerializable`` when it is not JSON the database stores
    (``jsontext``).
    """
    try:
        return None if result is None else jsontext.dumps(result)
    except (TypeError, ValueError) as exc:
        raise ResultNotSerializable(
            f"job {lease.job_id} returned {type(result).__name__}: {exc}"
        ) from exc


def release(lease: Lease) -> bool:
    """Hand the job back unrun (at shutdown): ready and due now, the attempt refunded.

    The lease token keeps its value and no history entry is added. Returns
    ``False`` and changes nothing when the lease is lost.
    """
    return _settle(lease, "release", {})


def _settle(lease: Lease, statement: str, params: dict[str, Any]) -> bool:
    fence = {"job_id": lease.job_id, "worker_id": lease.worker_id, "lease_token": lease.lease_token}
    applied = bool(sql.run_alone(queue_connection(), statement, {**fence, **params}))
    if not applied:
        log_lost_lease(statement, lease.job_id, lease.worker_id, lease.lease_token)
    return applied


def fail(lease: Lease, error: BaseException | ErrorInfo, retry_at: datetime | None) -> bool:
    """Record a failed attempt: ``ready`` again at ``retry_at``, or ``dead`` when it is ``None``.

    The job also becomes ``dead`` when its attempt budget is spent, whatever
    ``retry_at`` says. The error is stored bounded (``last_error`` keeps the
    traceback's end; the history keeps the last 10 entries). Returns ``False``
    and changes nothing when the lease is lost.
    """
    info = (error if isinstance(error, ErrorInfo) else ErrorInfo.from_exception(error)).bounded()

    def record(connection: BaseDatabaseWrapper, history: list[dict[str, object]]) -> bool:
        failure = _failure_row(
            lease.job_id,
            lease.lease_token,
            lease.worker_id,
            lease.attempt,
            history,
            info,
            retry_at,
        )
        return bool(_record_failures(connection, [failure], expired=False))

    return _settle_with_history(lease, "fail", record)


def _settle_with_history(
    lease: Lease,
    action: str,
    write: Callable[[BaseDatabaseWrapper, list[dict[str, object]]], bool],
) -> bool:
    """Lock the leased row, hand its error history to ``write``; log a lost lease.

    ``write`` runs in the same transaction, under the row lock, only while the
    lease's token is current; it re-checks the deadline by the database clock.
    """
    connection = queue_connection()
    fence = {"job_id": lease.job_id, "worker_id": lease.worker_id, "lease_token": lease.lease_token}
    with sql.write_transaction(connection):
        locked = sql.run(connection, "lock_lease", fence)
        applied = bool(locked) and write(connection, sql.to_json(locked[0][0]))
    if not applied:
        log_lost_lease(action, lease.job_id, lease.worker_id, lease.lease_token)
    return applied


def reap(limit: int = REAP_BATCH) -> ReapResult:
    """Recover up to ``limit`` jobs whose lease expired: ``ready`` with backoff, or ``dead``.

    A job with attempts left is retried after its task's backoff (the
    settings' policy when the task no longer imports); one whose budget is
    spent becomes ``dead`` with code ``LEASE_EXPIRED``. Either way the expiry
    is added to its history and ``attempts`` is kept. Safe with many reapers:
    rows another reaper holds are skipped.
    """
    connection = queue_connection()
    with sql.write_transaction(connection):
        expired = sql.run(connection, "lock_expired", {"limit": limit})
        if not expired:
            return ReapResult(retried=[], dead=[])
        failures = [_expiry_row(*row) for row in expired]
        settled = _record_failures(connection, failures, expired=True)
    result = ReapResult(
        retried=sorted(job_id for job_id, state in settled if state == JobState.READY),
        dead=sorted(job_id for job_id, state in settled if state == JobState.DEAD),
    )
    if settled:
        log.info("reaped expired leases retried=%s dead=%s", result.retried, result.dead)
    return result


def _expiry_row(
    job_id: int,
    lease_token: int,
    task: str,
    attempts: int,
    max_attempts: int,
    worker_id: str,
    history: object,
    backend: str | None,
) -> dict[str, Any]:
    info = ErrorInfo(LEASE_EXPIRED, f"lease of worker {worker_id} expired")
    retry_at = None
    if attempts < max_attempts:
        retry_at = timezone.now() + _delay(task, backend, attempts)
    return _failure_row(
        job_id, lease_token, worker_id, attempts, sql.to_json(history), info, retry_at
    )


def _delay(task: str, backend: str | None, attempt: int) -> timedelta:
    try:
        backoff = runnable.resolve(task, backend).backoff
    except TaskNotFound:
        backoff = conf.get().backoff
    return timedelta(seconds=backoff.delay(attempt))


def _failure_row(
    job_id: int,
    lease_token: int,
    worker_id: str,
    attempt: int,
    history: list[dict[str, object]],
    info: ErrorInfo,
    retry_at: datetime | None,
) -> dict[str, Any]:
    entry = history_entry(attempt, worker_id, info, timezone.now().isoformat())
    return {
        "job_id": job_id,
        "lease_token": lease_token,
        "worker_id": worker_id,
        "retry_at": retry_at,
        "code": info.code,
        "last_error": info.last_error,
        "errors": appended(history, entry),
    }


def _record_failures(
    connection: BaseDatabaseWrapper, rows: list[dict[str, Any]], *, expired: bool
) -> list[tuple[int, str]]:
    settled = sql.run(connection, "record_failures", {"rows": rows, "expired": expired})
    return [(job_id, state) for job_id, state in settled]


@dataclass(frozen=True)
class RequeueResult:
    """What one ``requeue_report`` did.

    ``requeued``: the dead jobs made ready. ``duplicates``: dead jobs left dead
    because another job with their ``(task, dedupe_key)`` is active, or was
    requeued by the same call (the lowest id of those selected wins).
    """

    requeued: list[int]
    duplicates: list[int]


def requeue(job_ids: Iterable[int], extra_attempts: int, actor: str) -> list[int]:
    """Give dead jobs ``extra_attempts`` more attempts and make them due now; return their ids.

    ``requeue_report`` without the report of the jobs skipped for their dedupe key.
    """
    return requeue_report(job_ids, extra_attempts, actor).requeued


def requeue_report(job_ids: Iterable[int], extra_attempts: int, actor: str) -> RequeueResult:
    """Give dead jobs ``extra_attempts`` more attempts and make them due now.

    Only ``dead`` jobs change; workers are woken when the transaction
    commits. Each keeps its id (so its idempotency key), attempts, dedupe key
    and error history. At most one job per ``(task, dedupe_key)`` is revived;
    the others are left dead and reported in ``duplicates``, never an error,
    also when a concurrent enqueue or requeue takes the key meanwhile (the
    statement is then run again, and sees it). ``actor`` is logged.
    """
    if extra_attempts < 1:
        raise ValueError(f"extra_attempts must be 1 or more, not {extra_attempts}.")
    ids = [int(job_id) for job_id in job_ids]
    if not ids:
        return RequeueResult(requeued=[], duplicates=[])
    params = {"job_ids": ids, "extra_attempts": extra_attempts, "channel": _channel()}
    connection = queue_connection()
    for attempt in range(1, REQUEUE_TRIES + 1):
        try:
            with sql.write_transaction(connection):
                requeued = sorted(row[0] for row in sql.run(connection, "requeue", params))
                duplicates = _dead_with_dedupe_key(connection, ids)
            break
        except IntegrityError:
            # A concurrent transaction committed an active job with one of the keys after
            # this statement's snapshot; the next run sees it and skips that job.
            if attempt == REQUEUE_TRIES:
                raise
    if requeued:
        log.info(
            "requeued dead jobs ids=%s extra_attempts=%s actor=%s", requeued, extra_attempts, actor
        )
    return RequeueResult(requeued=requeued, duplicates=duplicates)


def _dead_with_dedupe_key(connection: BaseDatabaseWrapper, job_ids: list[int]) -> list[int]:
    dead = Job.objects.using(connection.alias).filter(
        pk__in=job_ids, state=JobState.DEAD, dedupe_key__isnull=False
    )
    return sorted(dead.values_list("pk", flat=True))


def cancel(job_ids: Iterable[int]) -> list[int]:
    """Cancel the ``ready`` jobs among ``job_ids``; return the ids cancelled.

    Running and finished jobs are left as they are.
    """
    return _changed("cancel", job_ids, {})


def request_cancel(job_ids: Iterable[int], actor: str) -> list[int]:
    """Ask the ``running`` jobs among ``job_ids`` to stop; return the ids marked.

    Cooperative: the worker's heartbeat reads the mark within one renew
    interval and sets ``context.cancel_requested``; a task that honours it
    (``context.raise_if_cancelled()``) ends ``cancelled``, one that ignores it
    runs on to its outcome, the mark kept for operators to see. Ready jobs are
    cancelled with ``cancel``, not here; finished jobs are left alone. A job
    marked again keeps its first request's time. ``actor`` is logged.
    """
    ids = _changed("request_cancel", job_ids, {})
    if ids:
        log.info("cancel requested for running jobs ids=%s actor=%s", ids, actor)
    return ids


def cancel_running(lease: Lease) -> bool:
    """End the leased job ``cancelled``: its task stopped because it was asked to.

    A history entry with code ``CANCELLED`` is appended. Fenced like every
    transition: applies only for the current ``(worker_id, lease_token)`` with
    a live lease; otherwise changes nothing and returns ``False`` (a stale
    attempt cannot cancel the job's newer attempt).
    """
    info = ErrorInfo(CANCELLED, f"cancelled on request during attempt {lease.attempt}")

    def record(connection: BaseDatabaseWrapper, history: list[dict[str, object]]) -> bool:
        entry = history_entry(lease.attempt, lease.worker_id, info, timezone.now().isoformat())
        params = {
            "job_id": lease.job_id,
            "worker_id": lease.worker_id,
            "lease_token": lease.lease_token,
            "code": info.code,
            "last_error": info.last_error,
            "errors": appended(history, entry),
        }
        return bool(sql.run(connection, "cancel_running", params))

    return _settle_with_history(lease, "cancel_running", record)


def run_now(job_ids: Iterable[int]) -> list[int]:
    """Make the ``ready`` jobs among ``job_ids`` that are scheduled later due now.

    Returns the ids changed; jobs already due, running or finished are left alone.
    """
    return _changed("run_now", job_ids, {"channel": _channel()})


def _channel() -> str:
    return conf.get().notify_channel


def _changed(statement: str, job_ids: Iterable[int], params: dict[str, Any]) -> list[int]:
    ids = [int(job_id) for job_id in job_ids]
    if not ids:
        return []
    rows = sql.run_alone(queue_connection(), statement, {"job_ids": ids, **params})
    return sorted(row[0] for row in rows)


def log_lost_lease(action: str, job_id: int, worker_id: str, lease_token: int) -> None:
    """Log a write refused because the lease was lost: expected, never retried."""
    log.warning(
        "lease lost action=%s job=%s worker=%s lease_token=%s",
        action,
        job_id,
        worker_id,
        lease_token,
    )
