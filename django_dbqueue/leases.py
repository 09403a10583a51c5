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

import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dbqueue import clock, conf, dependencies, history, jsontext, sql
from django_dbqueue.errors import (
    CANCELLED,
    LEASE_EXPIRED,
    SHUTDOWN,
    ErrorInfo,
    appended,
    history_entry,
)
from django_dbqueue.exceptions import ResultNotSerializable, ResultTooLarge
from django_dbqueue.logfields import job_fields, jobs_fields
from django_dbqueue.models import Job, JobState, idempotency_key
from django_dbqueue.retry import Backoff

log = logging.getLogger(__name__)

#: Jobs the reaper handles in one transaction.
REAP_BATCH = 100

#: Runs of the requeue statement before a dedupe-key conflict with concurrent writers is raised.
REQUEUE_TRIES = 3
#: Most attempts one requeue grants (the admin's form and ``dbqueue_requeue`` take up to
#: this), far from where ``max_attempts`` (a 32-bit integer column) would overflow.
MAX_EXTRA_ATTEMPTS = 1000

#: ``(task, backend) -> Backoff``: a job's retry policy, from the columns naming its task.
BackoffLookup = Callable[[str, "str | None"], Backoff]

#: Rotates which queue goes first when a claim serves several.
_turns = itertools.count()

#: Keyed ready jobs a claim reads in claim order per job it may take, at most, before it
#: walks the serial keys instead (``serial_window`` of the claim statements).
SERIAL_WINDOW = 10


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
    #: When the job was due (database clock); ``None`` only for a lease built by hand.
    run_at: datetime | None = None
    #: What the enqueue hooks recorded on the job (``Job.meta``); ``None`` when nothing.
    meta: dict[str, Any] | None = None

    @classmethod
    def from_claim(cls, **fields: Any) -> Lease:
        """The lease of a claimed row, given every field: what ``Lease(**fields)`` makes.

        A claim makes one per job, and a frozen dataclass's ``__init__`` sets
        each field through ``object.__setattr__``, which costs more than the
        rest of reading the row; there is no ``__post_init__`` to skip.
        """
        lease = object.__new__(cls)
        lease.__dict__.update(fields)
        return lease

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts and requeues (see ``Job.idempotency_key``)."""
        return idempotency_key(self.job_id)

    @property
    def leased_at(self) -> datetime:
        """When the claim granted this lease (database clock): ``lease_until`` less its length."""
        return self.lease_until - timedelta(seconds=self.lease_seconds)


@dataclass(frozen=True)
class ReapResult:
    """What one ``reap`` did: jobs made ready again, and jobs now dead."""

    retried: list[int]
    dead: list[int]


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
    grow by one. On PostgreSQL the claim is one statement whatever the
    shape; one queue (named, or the only one with ready jobs) with no serial
    key in play takes a plan of its own that leases exactly what the general
    one would.
    """
    if limit < 1:
        return []
    params = claim_params(queues, worker_id, limit, next(_turns) % 1024)
    return _leases(sql.run_alone(queue_connection(), "claim", params), worker_id)


def claim_params(
    queues: Sequence[str] | None, worker_id: str, limit: int, turn: int = 0
) -> dict[str, Any]:
    """The parameters of the ``claim`` statement for ``claim(queues, worker_id, limit)``, with
    ``turn`` choosing which of several queues goes first."""
    return {
        "queues": list(queues) if queues is not None else None,
        "worker_id": worker_id,
        "limit": limit,
        "serial_window": SERIAL_WINDOW * limit,
        "turn": turn,
    }


def claim_jobs(job_ids: Iterable[int], worker_id: str) -> list[Lease]:
    """Lease the ``ready`` jobs among ``job_ids``, due or not (eager mode).

    The caller names the jobs, so priority, ``run_at`` and serial keys are
    not consulted; rows locked by other transactions are skipped (PostgreSQL,
    MySQL). Each claimed job's ``attempts`` and ``lease_token`` grow by one,
    as with ``claim``. Jobs no longer ready are left out.
    """
    ids = [int(job_id) for job_id in job_ids]
    if not ids:
        return []
    params = {"job_ids": ids, "worker_id": worker_id}
    return _leases(sql.run_alone(queue_connection(), "claim_jobs", params), worker_id)


def _leases(rows: list[sql.Row], worker_id: str) -> list[Lease]:
    # RETURNING has no order: hand the batch back in priority order.
    rows.sort(key=lambda row: (-row["priority"], sql.to_datetime(row["run_at"]), row["id"]))
    return [
        Lease.from_claim(
            job_id=row["id"],
            lease_token=row["lease_token"],
            worker_id=worker_id,
            task=row["task"],
            args=sql.to_json(row["args"]),
            kwargs=sql.to_json(row["kwargs"]),
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            lease_until=sql.to_datetime(row["lease_until"]),
            lease_seconds=row["lease_seconds"],
            queue=row["queue"],
            backend=row["backend"],
            run_at=sql.to_datetime(row["run_at"]),
            meta=sql.to_json(row["meta"]),
        )
        for row in rows
    ]


def next_due(queues: Sequence[str] | None) -> float | None:
    """Seconds until the next ``ready`` job of ``queues`` (``None``: every queue) becomes due.

    By the database clock, from the jobs not due yet: ``None`` when there is
    none. Jobs due already are left out, since a claim just passed them by
    (locked by another worker, or waiting behind their serial key). The end
    of a timed pause of one of ``queues`` is due too (``pauses``). One read,
    served by the ready index.
    """
    params = {"queues": list(queues) if queues is not None else None}
    rows = sql.run(queue_connection(), "next_due", params)
    seconds = rows[0]["seconds"] if rows else None
    return None if seconds is None else max(0.0, float(seconds))


@dataclass(frozen=True)
class Renewal:
    """What ``renew_all`` found for each lease it was given.

    ``owned``: leases extended. ``settled``: jobs no longer running because
    this very lease's own write settled them meanwhile (a success or failure
    written while the renewal was on its way), by job id with the state they
    are in: not a lost lease. ``lost``: the rest, taken by another worker or
    the reaper. ``cancel_requested``: owned jobs an operator asked to stop
    (``request_cancel``), read by the renew statement itself: no extra query.
    ``skipped``: jobs whose row another transaction held locked (PostgreSQL,
    MySQL): neither extended nor lost; renew them again later, and count them
    lost once their lease deadline has passed.
    """

    owned: set[int]
    settled: dict[int, str]
    lost: set[int]
    cancel_requested: set[int] = field(default_factory=set)
    skipped: set[int] = field(default_factory=set)


def renew(leases: Iterable[Lease]) -> set[int]:
    """Extend every lease still owned by its job's ``lease_seconds``; return their job ids.

    All leases go in one statement, which never waits for a row lock held
    elsewhere: such a lease is left as it is (see ``renew_all``'s ``skipped``).
    A lease missing from the result is lost, or was skipped: the job was
    reaped, re-claimed or finished, or its row is locked right now.
    """
    return renew_all(leases).owned


def renew_all(leases: Iterable[Lease]) -> Renewal:
    """``renew``, telling the leases another worker or the reaper took from those settled
    by their own write (``settled_by``), and from those whose row was locked elsewhere
    (``skipped``); only the first are logged as lost."""
    held = list(leases)
    if not held:
        return Renewal(owned=set(), settled={}, lost=set())
    batch = [
        {"job_id": lease.job_id, "lease_token": lease.lease_token, "worker_id": lease.worker_id}
        for lease in held
    ]
    rows = sql.run_alone(queue_connection(), "renew", {"leases": batch})
    skipped = {row["id"] for row in rows if row["skipped"]}
    renewed = [row for row in rows if not row["skipped"]]
    owned = {row["id"] for row in renewed}
    missing = [lease for lease in held if lease.job_id not in owned | skipped]
    settled = settled_by(missing) if missing else {}
    lost = {lease.job_id for lease in missing if lease.job_id not in settled}
    for lease in missing:
        if lease.job_id in lost:
            log_lost_lease("renew", lease)
    marked = {row["id"] for row in renewed if row["cancel_requested_at"] is not None}
    return Renewal(
        owned=owned, settled=settled, lost=lost, cancel_requested=marked, skipped=skipped
    )


def settled_by(leases: Iterable[Lease]) -> dict[int, str]:
    """The jobs among ``leases`` whose latest transition was their lease's own write.

    For each such job, its state now: ``succeeded`` (the lease completed
    it), or ``ready``/``dead``/``cancelled`` after a failure the lease
    recorded (the job's newest history entry is that attempt's, by that
    worker, and not an expiry). A job still running, or moved on by another
    claim or by the reaper, is left out. This tells a write whose reply was
    lost (it did apply) from a lease that was really lost; it reads a
    handful of rows by primary key and is only called after a write or
    renewal missed.
    """
    by_id = {lease.job_id: lease for lease in leases}
    rows = (
        Job.objects.using(conf.get().database)
        .filter(pk__in=list(by_id))
        .values_list("pk", "state", "lease_token", "errors")
    )
    return {
        job_id: state
        for job_id, state, lease_token, errors in rows
        if lease_token == by_id[job_id].lease_token and _written_by(by_id[job_id], state, errors)
    }


def _written_by(lease: Lease, state: str, errors: list[dict[str, Any]]) -> bool:
    if state == JobState.SUCCEEDED:
        return True  # Only the holder of this lease token can complete the job.
    if state == JobState.RUNNING or not errors:
        return False
    newest = errors[-1]
    return (
        newest.get("attempt") == lease.attempt
        and newest.get("worker") == lease.worker_id
        and newest.get("code") != LEASE_EXPIRED
    )


@dataclass(frozen=True)
class Completion:
    """What ``complete_many`` did: ``completed`` jobs, and ``skipped`` ones.

    A skipped job's row was locked by another transaction (PostgreSQL,
    MySQL): nothing was written and its lease is not lost; write it again
    shortly. Every other job asked for lost its lease.
    """

    completed: set[int]
    skipped: set[int] = field(default_factory=set)


#: Pause before a completion skipped over a locked row is tried again.
LOCKED_RETRY = 0.2


def complete(lease: Lease, result: object) -> bool:
    """Mark the leased job ``succeeded`` and store its JSON ``result``.

    Returns ``False`` and changes nothing when the lease is lost. Raises
    ``ResultNotSerializable`` or ``ResultTooLarge`` (writing nothing) when
    ``result`` cannot be stored (``encode_result``). While another transaction
    holds the job's row locked, it tries again every ``LOCKED_RETRY``
    seconds: a lock held past the lease's deadline ends in a lost lease.
    """
    return complete_json(lease, encode_result(lease, result))


def complete_json(lease: Lease, encoded: str | None) -> bool:
    """``complete`` given the result as stored already (``encode_result``)."""
    done = [(lease, encoded)]
    while lease.job_id in (completion := complete_many(done)).skipped:
        time.sleep(LOCKED_RETRY)
    return lease.job_id in completion.completed


def complete_many(done: Sequence[tuple[Lease, str | None]]) -> Completion:
    """Complete several leased jobs in one statement; report the ids completed and skipped.

    ``done`` pairs each lease with its result as JSON text (``encode_result``),
    one lease per job: the outcome is reported by job id.
    A job that other jobs wait for is completed in a transaction that also
    settles them (``dependencies.settle``: the last dependency's success makes
    its dependent ready in the same commit). Every row keeps its own fencing
    check: a job whose lease is lost is left as it is, logged, and missing
    from the result. A job this lease already completed (the reply of an
    earlier try was lost) counts as completed. A row another transaction holds
    locked is never awaited: it is ``skipped``, so one lock cannot hold back
    the rest of the batch.
    """
    if not done:
        return Completion(completed=set())
    rows = [
        {
            "job_id": lease.job_id,
            "lease_token": lease.lease_token,
            "worker_id": lease.worker_id,
            "result": encoded,
        }
        for lease, encoded in done
    ]
    written = sql.run_alone(queue_connection(), "complete", {"rows": rows, "settles": False})
    deferred = {row["id"] for row in written if row["deferred"]}
    if deferred:
        written = [row for row in written if not row["deferred"]]
        written += _complete_settling([row for row in rows if row["job_id"] in deferred])
    skipped = {row["id"] for row in written if row["skipped"]}
    completed = {row["id"] for row in written if not row["skipped"]}
    missing = [lease for lease, _ in done if lease.job_id not in completed | skipped]
    if missing:
        # A retried write whose first reply was lost finds its own success already there.
        completed |= {
            job_id for job_id, state in settled_by(missing).items() if state == JobState.SUCCEEDED
        }
    for lease in missing:
        if lease.job_id not in completed:
            log_lost_lease("complete", lease)
    return Completion(completed=completed, skipped=skipped)


def _complete_settling(rows: list[dict[str, Any]]) -> list[sql.Row]:
    """``complete`` for jobs other jobs wait for: their dependents settle in the same commit."""
    connection = queue_connection()
    with sql.write_transaction(connection):
        written = sql.run(connection, "complete", {"rows": rows, "settles": True})
        completed = [row["id"] for row in written if not row["skipped"]]
        dependencies.settle(connection, dict.fromkeys(completed, JobState.SUCCEEDED))
    return written


def encode_result(lease: Lease, result: object) -> str | None:
    """``result`` as stored: JSON text, or ``None`` (SQL NULL, as Django's JSONField stores it).

    Raises ``ResultNotSerializable`` when it is not JSON every database stores
    (``jsontext``: no NaN, NUL character or surrogate code point), and
    ``ResultTooLarge`` when its JSON is longer than ``MAX_RESULT_BYTES``.
    """
    if result is None:
        return None
    try:
        text = jsontext.dumps(result)
    except (TypeError, ValueError) as exc:
        raise ResultNotSerializable(
            f"job {lease.job_id} returned {type(result).__name__}: {exc}"
        ) from exc
    limit = conf.get().max_result_bytes
    # ASCII (json escapes the rest), so characters are bytes.
    if limit and len(text) > limit:
        raise ResultTooLarge(
            f"job {lease.job_id} returned {len(text)} bytes of JSON, more than "
            f"DBQUEUE['MAX_RESULT_BYTES'] ({limit}). Store large results in a row or a file "
            "and return its id."
        )
    return text


def release(lease: Lease, *, started: bool) -> bool:
    """Hand the job back at shutdown: ready and due now, or ``dead`` when its budget is spent.

    An attempt whose code never ``started`` is refunded: the job is ready,
    ``attempts`` one less, the lease token kept, no history entry. One whose
    code started (and was interrupted) keeps its attempt, as any failure
    does: a history entry with code ``SHUTDOWN`` is added, and the job is
    ready again at once, or ``dead`` if that was its last attempt, so
    repeated shutdowns (rolling deploys) cannot run a job more than
    ``max_attempts`` times. Returns ``False`` and changes nothing when the
    lease is lost.
    """
    if not started:
        return _settle(lease, "release", {})
    info = ErrorInfo(SHUTDOWN, f"worker {lease.worker_id} shut down during attempt {lease.attempt}")
    return fail(lease, info, delay=0)


def _settle(lease: Lease, statement: str, params: dict[str, Any]) -> bool:
    fence = {"job_id": lease.job_id, "worker_id": lease.worker_id, "lease_token": lease.lease_token}
    applied = bool(sql.run_alone(queue_connection(), statement, {**fence, **params}))
    if not applied:
        log_lost_lease(statement, lease)
    return applied


def fail(
    lease: Lease,
    error: BaseException | ErrorInfo,
    retry_at: datetime | None = None,
    *,
    delay: float | None = None,
) -> bool:
    """Record a failed attempt: ``ready`` again at ``retry_at`` or ``delay`` seconds from now
    by the database clock, or ``dead`` when neither is given.

    ``delay`` is how a worker retries (a backoff, ``Retry(delay=...)``): the
    database adds it to its own clock, so a worker whose clock is off neither
    runs the retry early nor holds it back. Passing both is a ``ValueError``.
    The job also becomes ``dead`` when its attempt budget is spent, whatever
    they say. The error is stored bounded (``last_error`` keeps the
    traceback's end; the history keeps the last 10 entries, stamped by the
    database clock). Returns ``False`` and changes nothing when the lease is
    lost; ``True`` also when this lease's failure is already recorded (the
    reply of an earlier try was lost). While another transaction holds the
    job's row locked it raises at once (``NOWAIT``: a transient conflict,
    ``faults.Fault.CONFLICT``) instead of waiting, so the caller tries again
    later and its thread is not held up.
    """
    if retry_at is not None and delay is not None:
        raise ValueError("fail() takes retry_at or delay, not both.")
    info = (error if isinstance(error, ErrorInfo) else ErrorInfo.from_exception(error)).bounded()

    def record(connection: BaseDatabaseWrapper, locked: sql.Row) -> bool:
        failure = _failure_row(
            lease.job_id,
            lease.lease_token,
            lease.worker_id,
            lease.attempt,
            locked,
            info,
            retry_at=retry_at,
            retry_in=delay,
        )
        return bool(_record_failures(connection, [failure], expired=False))

    return _settle_with_history(lease, "fail", record)


def _settle_with_history(
    lease: Lease,
    action: str,
    write: Callable[[BaseDatabaseWrapper, sql.Row], bool],
) -> bool:
    """Lock the leased row, hand it to ``write``; log a lost lease.

    ``write`` gets the row of ``lock_lease`` (its error history, and the
    database ``clock`` to stamp a new entry with) and runs in the same
    transaction, under the row lock, only while the lease's token is current;
    it re-checks the deadline by the database clock.
    A row another transaction holds locked raises at once (``lock_lease`` is
    ``NOWAIT``), writing nothing.
    """
    connection = queue_connection()
    fence = {"job_id": lease.job_id, "worker_id": lease.worker_id, "lease_token": lease.lease_token}
    with sql.write_transaction(connection):
        locked = sql.run(connection, "lock_lease", fence)
        applied = bool(locked) and write(connection, locked[0])
    if not applied:
        # A retried write whose first reply was lost finds its own write already recorded.
        applied = settled_by([lease]).get(lease.job_id) not in (None, JobState.SUCCEEDED)
    if not applied:
        log_lost_lease(action, lease)
    return applied


def reap(limit: int = REAP_BATCH, *, backoff_for: BackoffLookup) -> ReapResult:
    """Recover up to ``limit`` jobs whose lease expired: ``ready`` with backoff, or ``dead``.

    A job with attempts left is retried after ``backoff_for(task, backend)``
    (the runtime passes its task's policy, the settings' when the task no
    longer imports: ``runnable.backoff_for``); one whose budget is spent
    becomes ``dead`` with code ``LEASE_EXPIRED``. Either way the expiry is
    added to its history and ``attempts`` is kept. Safe with many reapers:
    rows another reaper holds are skipped.
    """
    connection = queue_connection()
    with sql.write_transaction(connection):
        expired = sql.run(connection, "lock_expired", {"limit": limit})
        if not expired:
            return ReapResult(retried=[], dead=[])
        failures = [_expiry_row(row, backoff_for) for row in expired]
        settled = _record_failures(connection, failures, expired=True)
    result = ReapResult(
        retried=sorted(job_id for job_id, state in settled if state == JobState.READY),
        dead=sorted(job_id for job_id, state in settled if state == JobState.DEAD),
    )
    if settled:
        log.info(
            "reaped expired leases retried=%s dead=%s",
            result.retried,
            result.dead,
            extra={**jobs_fields(result.retried + result.dead), "error_code": LEASE_EXPIRED},
        )
    return result


def _expiry_row(expired: sql.Row, backoff_for: BackoffLookup) -> dict[str, Any]:
    """The failure to record for one row of ``lock_expired``."""
    attempts = expired["attempts"]
    info = ErrorInfo(LEASE_EXPIRED, f"lease of worker {expired['worker_id']} expired")
    retry_in = None
    if attempts < expired["max_attempts"]:
        retry_in = backoff_for(expired["task"], expired["backend"]).delay(attempts)
    return _failure_row(
        expired["id"],
        expired["lease_token"],
        expired["worker_id"],
        attempts,
        expired,
        info,
        retry_in=retry_in,
    )


def _failure_row(
    job_id: int,
    lease_token: int,
    worker_id: str,
    attempt: int,
    locked: sql.Row,
    info: ErrorInfo,
    *,
    retry_at: datetime | None = None,
    retry_in: float | None = None,
) -> dict[str, Any]:
    """One row of ``record_failures``: ``locked`` holds the job's ``errors`` and the ``clock``.

    The job is retried at ``retry_at``, or ``retry_in`` seconds after the
    database clock when the statement runs; dead when both are ``None``.
    """
    entry = history_entry(attempt, worker_id, info, _stamp(locked))
    return {
        "job_id": job_id,
        "lease_token": lease_token,
        "worker_id": worker_id,
        "retry_at": retry_at,
        "retry_in": retry_in,
        "code": info.code,
        "last_error": info.last_error,
        "errors": appended(sql.to_json(locked["errors"]), entry),
    }


def _stamp(locked: sql.Row) -> str:
    """A history entry's time: the database clock the locking statement read."""
    return clock.stamp(sql.to_datetime(locked["clock"]))


def _record_failures(
    connection: BaseDatabaseWrapper, rows: list[dict[str, Any]], *, expired: bool
) -> list[tuple[int, str]]:
    """Run ``record_failures``; the dependents of the jobs it made dead settle with them."""
    settled = sql.run(connection, "record_failures", {"rows": rows, "expired": expired})
    dead = {row["id"]: row["state"] for row in settled if row["state"] == JobState.DEAD}
    if dead:
        dependencies.settle(connection, dead)
    return [(row["id"], row["state"]) for row in settled]


@dataclass(frozen=True)
class RequeueResult:
    """What one ``requeue_report`` did.

    ``requeued``: the dead jobs made ready. ``duplicates``: dead jobs left dead
    because another job with their ``(task, dedupe_key)`` is active, or was
    requeued by the same call (the lowest id of those selected wins).
    """

    requeued: list[int]
    duplicates: list[int]
    #: Jobs the requeued jobs' failure had cancelled, waiting again (``dependencies.reopen``).
    waiting_again: list[int] = field(default_factory=list)


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
    statement is then run again, and sees it). The jobs their failure had
    cancelled (``DEPENDENCY_FAILED``) wait for them again, recorded in their
    history (``dependencies.reopen``), so a workflow resumes where it
    stopped. ``actor`` is logged.
    """
    if not 1 <= extra_attempts <= MAX_EXTRA_ATTEMPTS:
        raise ValueError(
            f"extra_attempts must be from 1 to {MAX_EXTRA_ATTEMPTS}, not {extra_attempts}."
        )
    ids = [int(job_id) for job_id in job_ids]
    if not ids:
        return RequeueResult(requeued=[], duplicates=[])
    params = {"job_ids": ids, "extra_attempts": extra_attempts, "channel": _channel()}
    connection = queue_connection()
    for attempt in range(1, REQUEUE_TRIES + 1):
        try:
            with sql.write_transaction(connection):
                history.restore(connection, ids, [JobState.DEAD])
                rows = sql.run(connection, "requeue", params)
                requeued = sorted(row["id"] for row in rows)
                duplicates = _dead_with_dedupe_key(connection, ids)
                held = sorted(row["id"] for row in rows if row["held"])
                revived = dependencies.reopen(connection, held).revived
            break
        except IntegrityError:
            # A concurrent transaction committed an active job with one of the keys after
            # this statement's snapshot; the next run sees it and skips that job.
            if attempt == REQUEUE_TRIES:
                raise
    if requeued:
        # Once committed: a caller's transaction that rolls back (a dry run) requeued nothing.
        transaction.on_commit(
            functools.partial(
                log.info,
                "requeued dead jobs ids=%s extra_attempts=%s actor=%s waiting_again=%s",
                requeued,
                extra_attempts,
                actor,
                revived,
            ),
            using=connection.alias,
        )
    return RequeueResult(requeued=requeued, duplicates=duplicates, waiting_again=revived)


def _dead_with_dedupe_key(connection: BaseDatabaseWrapper, job_ids: list[int]) -> list[int]:
    dead = Job.objects.using(connection.alias).filter(
        pk__in=job_ids, state=JobState.DEAD, dedupe_key__isnull=False
    )
    return sorted(dead.values_list("pk", flat=True))


def cancel(job_ids: Iterable[int]) -> list[int]:
    """Cancel the ``ready`` and ``waiting`` jobs among ``job_ids``; return the ids cancelled.

    Running and finished jobs are left as they are. The jobs that wait for a
    cancelled job settle in the same transaction (``dependencies.settle``):
    cancelled in turn, or run anyway under ``on_failure="run"``.
    """
    ids = sorted(int(job_id) for job_id in job_ids)
    if not ids:
        return []
    connection = queue_connection()
    with sql.write_transaction(connection):
        cancelled = sorted(row["id"] for row in sql.run(connection, "cancel", {"job_ids": ids}))
        dependencies.settle(connection, dict.fromkeys(cancelled, JobState.CANCELLED))
    return cancelled


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
        log.info(
            "cancel requested for running jobs ids=%s actor=%s", ids, actor, extra=jobs_fields(ids)
        )
    return ids


def cancel_running(lease: Lease) -> bool:
    """End the leased job ``cancelled``: its task stopped because it was asked to.

    A history entry with code ``CANCELLED`` is appended. Fenced like every
    transition: applies only for the current ``(worker_id, lease_token)`` with
    a live lease; otherwise changes nothing and returns ``False`` (a stale
    attempt cannot cancel the job's newer attempt). ``True`` also when this
    lease's cancellation is already recorded (the reply of an earlier try was lost).
    """
    info = ErrorInfo(CANCELLED, f"cancelled on request during attempt {lease.attempt}")

    def record(connection: BaseDatabaseWrapper, locked: sql.Row) -> bool:
        entry = history_entry(lease.attempt, lease.worker_id, info, _stamp(locked))
        params = {
            "job_id": lease.job_id,
            "worker_id": lease.worker_id,
            "lease_token": lease.lease_token,
            "code": info.code,
            "last_error": info.last_error,
            "errors": appended(sql.to_json(locked["errors"]), entry),
        }
        if not sql.run(connection, "cancel_running", params):
            return False
        dependencies.settle(connection, {lease.job_id: JobState.CANCELLED})
        return True

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
    return sorted(row["id"] for row in rows)


def log_lost_lease(action: str, lease: Lease) -> None:
    """Log a write refused because the lease was lost: expected, never retried.

    The line carries the job's fields (``logfields.job_fields``) and its ``lease_token``.
    """
    log.warning(
        "lease lost action=%s job=%s worker=%s lease_token=%s",
        action,
        lease.job_id,
        lease.worker_id,
        lease.lease_token,
        extra={**job_fields(lease), "lease_token": lease.lease_token},
    )
