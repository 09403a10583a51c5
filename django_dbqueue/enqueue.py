"""Writing jobs: validation first, then one INSERT in the caller's transaction."""

from __future__ import annotations

import functools
import math
import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.signals import post_save
from django.utils import timezone

from django_dbqueue import (
    conf,
    dependencies,
    durations,
    history,
    limits,
    middleware,
    sql,
    wakeups,
)
from django_dbqueue.arguments import Call, Callee, encode_calls
from django_dbqueue.exceptions import DbQueueError, InvalidJob
from django_dbqueue.models import EdgeState, Job, JobState, OnFailure
from django_dbqueue.validation import (
    INT_MIN,
    check_importable,
    check_int,
    check_queue,
    check_text,
)

#: How often an enqueue with a dedupe key re-tries when the active job it
#: collided with finished before it could be read back.
DEDUPE_TRIES = 3


#: The columns of a job just inserted that no enqueue option sets.
FRESH_COLUMNS: dict[str, Any] = {
    "state": JobState.READY,
    "attempts": 0,
    "lease_token": 0,
    "worker_id": None,
    "last_worker_id": "",
    "lease_until": None,
    "started_at": None,
    "finished_at": None,
    "result": None,
    "last_error_code": "",
    "last_error": "",
    "progress": None,
    "pending_dependencies": 0,
}


class TaskDefaults(Protocol):
    """What a task fixes for every job that enqueue reads (``tasks.TaskOptions``)."""

    @property
    def queue(self) -> str | None: ...
    @property
    def priority(self) -> int: ...
    @property
    def max_attempts(self) -> int | None: ...
    @property
    def lease(self) -> float | None: ...
    @property
    def concurrency(self) -> int | None: ...
    @property
    def rate(self) -> str | None: ...


class OneCall(Protocol):
    """A task with per-call options, ready to enqueue (``tasks.TaskCall``)."""

    def enqueue(self, *args: Any, **kwargs: Any) -> Job: ...


class Enqueueable(Protocol):
    """What enqueue needs of a task (``tasks.Task`` is one): this module never imports
    ``tasks``, which builds on it."""

    @property
    def name(self) -> str: ...
    @property
    def options(self) -> TaskDefaults: ...
    @property
    def callee(self) -> Callee: ...
    def using(
        self, *, dedupe_key: str | None = None, subject: models.Model | None = None
    ) -> OneCall:
        """Options for the next enqueue (here: the subject and dedupe key of ``on_save``)."""
        ...


@dataclass(frozen=True)
class EnqueueOptions:
    """Per-call options of ``Task.using(...)``; ``None`` falls back to the task's."""

    delay: float | timedelta | None = None
    run_at: datetime | None = None
    priority: int | None = None
    queue: str | None = None
    dedupe_key: str | None = None
    subject: models.Model | None = None
    serial_key: str | None = None
    #: The jobs (or ids) the new jobs wait for, and what they do when one of those fails.
    after: Sequence[Job | int] | None = None
    on_dependency_failure: str | None = None
    #: The global limit the jobs share (``limits``): sized and paced as the task's.
    concurrency_key: str | None = None


@dataclass(frozen=True)
class JobSpec:
    """The validated column values every job of one enqueue call shares."""

    task: str
    queue: str
    priority: int
    max_attempts: int
    lease_seconds: int
    run_at: datetime | None = None
    delay: float = 0.0
    dedupe_key: str | None = None
    serial_key: str | None = None
    subject_type_id: int | None = None
    subject_id: str | None = None
    backend: str | None = None
    #: What the enqueue hooks recorded (``middleware.enqueue_meta``); ``None``: nothing.
    meta: dict[str, Any] | None = None
    #: The limit the jobs count against (``limits``): its name, size and rate.
    limit_key: str | None = None
    limit_size: int | None = None
    limit_rate: float | None = None
    #: The ids of the jobs each new job waits for (``using(after=...)``), in order.
    after: tuple[int, ...] = ()
    on_dependency_failure: str = OnFailure.CANCEL


#: JobSpec fields that are not columns of the insert (``insert`` writes them as edges).
EDGE_FIELDS = ("after", "on_dependency_failure")


@dataclass(frozen=True)
class Shape:
    """A spec laid out once: the statement's parameters and the returned jobs' columns."""

    spec: JobSpec
    #: The statement's parameters but for ``rows`` and ``notify``.
    params: dict[str, Any]
    #: Every column a job of this spec starts with, by attname, its own ones left ``None``.
    columns: dict[str, Any]

    @classmethod
    def of(cls, spec: JobSpec, cfg: conf.QueueSettings) -> Shape:
        shared = {**FRESH_COLUMNS, **vars(spec)}
        columns = {name: value for name, value in vars(spec).items() if name not in EDGE_FIELDS}
        return cls(
            spec=spec,
            params={
                **columns,
                "channel": cfg.notify_channel,
                "state": JobState.READY,
                "pending_dependencies": 0,
            },
            columns={column: shared.get(column) for column in job_columns()},
        )

    def waiting(self, pending: int) -> Shape:
        """This shape for jobs ``waiting`` for ``pending`` dependencies."""
        fields = {"state": JobState.WAITING, "pending_dependencies": pending}
        return Shape(
            spec=self.spec,
            params={**self.params, **fields},
            columns={**self.columns, **fields},
        )

    def with_meta(self, meta: dict[str, Any]) -> Shape:
        """This shape with ``meta`` (the enqueue hooks'): a copy, at a fraction of ``of``'s cost."""
        return Shape(
            spec=replace(self.spec, meta=meta),
            params={**self.params, "meta": meta},
            columns={**self.columns, "meta": meta},
        )


class Shapes:
    """The ``Shape`` of each task and its queue and priority options, for one ``cfg``.

    Entries are built by ``task_spec``, which validates, so a refused shape is
    never kept; every entry is dropped when the settings change
    (``conf.get()`` returns another object then) or past ``LIMIT`` entries.
    """

    LIMIT = 1024

    def __init__(self) -> None:
        self._cfg: conf.QueueSettings | None = None
        self._shapes: dict[tuple[object, ...], Shape] = {}
        self._lock = threading.Lock()

    def get(self, task: Enqueueable, options: EnqueueOptions, cfg: conf.QueueSettings) -> Shape:
        key = (task, options.queue, options.priority)
        found = self._shapes.get(key) if self._cfg is cfg else None
        if found is not None:
            return found
        shape = Shape.of(task_spec(task, options, cfg), cfg)
        with self._lock:
            if self._cfg is not cfg or len(self._shapes) >= self.LIMIT:
                self._cfg, self._shapes = cfg, {}
            self._shapes[key] = shape
        return shape

    def clear(self) -> None:
        with self._lock:
            self._cfg, self._shapes = None, {}


shapes = Shapes()


def enqueue(task: Enqueueable, calls: list[Call], options: EnqueueOptions) -> list[Job]:
    """Validate, then insert one job per call in one statement; jobs in input order.

    Runs in the caller's transaction on the queue's database, if any. Raises
    ``InvalidJob`` before writing anything when an argument or option is bad.
    What the task and its queue and priority fix is validated once per
    settings (``shapes``); per-call options and the arguments on every call.
    """
    if not calls:
        return []
    cfg = conf.get()
    shape = shapes.get(task, options, cfg)
    if has_per_call_options(options):
        shape = Shape.of(per_call_spec(shape.spec, options, cfg), cfg)
    rows = encode_calls(task.callee, calls, cfg.max_args_bytes)
    return insert(shape.spec, calls, rows, cfg, shape)


def insert(
    spec: JobSpec,
    calls: list[Call],
    rows: str,
    cfg: conf.QueueSettings | None = None,
    shape: Shape | None = None,
) -> list[Job]:
    """Insert one job per call (``rows``: the calls as JSON) in the caller's transaction.

    A ``dedupe_key`` an unfinished job of the same task holds returns that job,
    unchanged, with ``deduplicated=True``. Workers are woken at commit, once
    per queue and transaction (``wakeups``). Jobs with dependencies
    (``spec.after``) are written with their edges (``insert_waiting``), in a
    transaction of their own when the caller has none. ``shape`` is ``spec``'s, when
    the caller has it. The enqueue hooks (``middleware.enqueue_meta``) run
    first: what they add is the jobs' ``meta``.
    """
    cfg = cfg or conf.get()
    shape = shape or Shape.of(spec, cfg)
    meta = middleware.enqueue_meta(spec.task, spec.queue, len(calls))
    if meta is not None:
        shape = shape.with_meta(meta)
    connection = connections[cfg.database]
    if spec.after:
        if not connection.in_atomic_block:
            with transaction.atomic(using=connection.alias):
                return insert_waiting(connection, spec, calls, rows, shape)
        return insert_waiting(connection, spec, calls, rows, shape)
    return insert_rows(connection, spec, calls, rows, shape)


def insert_rows(
    connection: BaseDatabaseWrapper, spec: JobSpec, calls: list[Call], rows: str, shape: Shape
) -> list[Job]:
    """Run the insert for ``shape``: wake workers for ready jobs; read a duplicate back."""
    ready = shape.params["state"] == JobState.READY
    pending = wakeups.pending(connection)
    notify = ready and wakeups.notifies(pending, spec.queue)
    statement = single_insert(connection) if len(calls) == 1 else "insert_jobs"
    if statement == "insert_job_call":  # the shape's parameters as one JSON object
        params = {"shape": shape.params, "rows": rows, "notify": notify}
    else:
        params = {**shape.params, "rows": rows, "count": len(calls), "notify": notify}
    for _ in range(DEDUPE_TRIES):
        inserted = sql.run(connection, statement, params)
        if inserted:
            jobs = built_jobs(connection.alias, shape, calls, inserted)
            if ready:
                wakeups.announce(connection, spec.queue, [job.id for job in jobs], pending)
            return jobs
        existing = (
            Job.objects.using(connection.alias)
            .unfinished()
            .filter(task=spec.task, dedupe_key=spec.dedupe_key)
            .first()
        )
        if existing is not None:
            existing.deduplicated = True
            return [existing]
    raise DbQueueError(
        f"{spec.task}: the active job holding dedupe_key {spec.dedupe_key!r} kept "
        "changing while enqueueing; try again."
    )


#: Single-job enqueues a connection sends as the ``insert_job`` statement before it calls
#: PostgreSQL's ``dbqueue_enqueue_job`` (``insert_job_call``) instead. The call saves the
#: INSERT's parse and plan, about 0.06-0.09 ms an enqueue on Django's defaults; its first
#: call in a session loads PL/pgSQL and compiles the function, about 1.2 ms (measured on 2
#: cores, PostgreSQL 15). So a connection opened for one web request (``CONN_MAX_AGE=0``)
#: that enqueues a few jobs never pays for it, and a long-lived one soon gains.
STATEMENT_ENQUEUES = 16

#: Single-job enqueues each open DB-API connection has sent as the statement, up to
#: ``STATEMENT_ENQUEUES``; a connection of a new session starts again from none.
_statement_enqueues: WeakKeyDictionary[Any, int] = WeakKeyDictionary()
_statement_enqueues_lock = threading.Lock()


def single_insert(connection: BaseDatabaseWrapper) -> str:
    """The block that inserts one job on ``connection``: ``insert_job_call`` once the
    connection has sent ``STATEMENT_ENQUEUES`` as ``insert_job`` (where the vendor has both),
    else ``insert_job`` (where it has it), else ``insert_jobs``."""
    if not sql.defines(connection, "insert_job"):
        return "insert_jobs"
    if not sql.defines(connection, "insert_job_call"):
        return "insert_job"
    connection.ensure_connection()
    session = connection.connection
    with _statement_enqueues_lock:
        sent = _statement_enqueues.get(session, 0)
        if sent >= STATEMENT_ENQUEUES:
            return "insert_job_call"
        _statement_enqueues[session] = sent + 1
    return "insert_job"


def insert_waiting(
    connection: BaseDatabaseWrapper, spec: JobSpec, calls: list[Call], rows: str, shape: Shape
) -> list[Job]:
    """Insert jobs that wait for ``spec.after``, and their edges, in the caller's transaction.

    The dependencies are read under a share lock (``lock_dependencies``) held to
    the commit, so none finishes unseen before the edges are visible. A job
    waits for the dependencies not yet succeeded; with none left it is ready at
    once. A dependency already ``dead`` or ``cancelled`` settles the new edge at
    once (``dependencies.settle``), as if it had just ended. Raises
    ``InvalidJob`` when a dependency does not exist (never, or purged).

    A dependency the reaper is moving to its history table at that instant is
    found there (``history.locked_wherever``).
    """
    found = {
        row["id"]: row["state"]
        for row in history.locked_wherever(connection, "lock_dependencies", spec.after)
    }
    missing = [job_id for job_id in spec.after if job_id not in found]
    if missing:
        raise InvalidJob(
            f"after: no job with id {', '.join(map(str, missing))} (never enqueued, "
            "rolled back, or purged)."
        )
    unsettled = [job_id for job_id in spec.after if found[job_id] != JobState.SUCCEEDED]
    if unsettled:
        shape = shape.waiting(len(unsettled))
    jobs = insert_rows(connection, spec, calls, rows, shape)
    fresh = [job for job in jobs if not job.deduplicated]
    edges = [
        {
            "job_id": job.id,
            "depends_on_id": depends_on,
            "position": position,
            "on_failure": spec.on_dependency_failure,
            "state": EdgeState.PENDING if depends_on in unsettled else EdgeState.RESOLVED,
        }
        for job in fresh
        for position, depends_on in enumerate(spec.after)
    ]
    if edges:
        sql.run(connection, "insert_dependencies", {"rows": edges})
        ended = {
            job_id: found[job_id]
            for job_id in unsettled
            if found[job_id] in (JobState.DEAD, JobState.CANCELLED)
        }
        if ended:
            settled = dependencies.settle(connection, ended)
            for job in fresh:
                if job.id in settled.released or job.id in settled.cancelled:
                    job.refresh_from_db(using=connection.alias)
    return jobs


def task_spec(task: Enqueueable, options: EnqueueOptions, cfg: conf.QueueSettings) -> JobSpec:
    """The validated columns the task, the call's queue and priority and ``cfg`` fix.

    Raises ``InvalidJob`` when no worker could import the task by its name,
    the queue or priority is invalid, or the job would count against two limits.
    """
    check_importable(task.name, object, lambda found: found is task)
    queue = options.queue if options.queue is not None else task.options.queue or cfg.default_queue
    priority = options.priority if options.priority is not None else task.options.priority
    queue = check_queue(queue, cfg.queues)
    limit = limits.of_task(task.name, task.options.concurrency, task.options.rate, queue, cfg)
    return JobSpec(
        task=task.name,
        queue=queue,
        priority=check_int("priority", priority, INT_MIN),
        max_attempts=task.options.max_attempts or cfg.max_attempts,
        # The column holds whole seconds; a lease is never shorter than asked for.
        lease_seconds=math.ceil(task.options.lease or cfg.lease_seconds),
        limit_key=limit.key,
        limit_size=limit.size,
        limit_rate=limit.rate,
    )


def has_per_call_options(options: EnqueueOptions) -> bool:
    """Whether ``options`` set anything beyond the queue and priority (``per_call_spec``)."""
    return not (
        options.delay is None
        and options.run_at is None
        and options.dedupe_key is None
        and options.serial_key is None
        and options.subject is None
        and options.after is None
        and options.on_dependency_failure is None
        and options.concurrency_key is None
    )


def per_call_spec(spec: JobSpec, options: EnqueueOptions, cfg: conf.QueueSettings) -> JobSpec:
    """``spec`` with the call's schedule, keys and subject, each validated."""
    if not has_per_call_options(options):
        return spec
    subject_type_id, subject_id = subject_columns(options.subject)
    run_at, delay = schedule(options)
    serial_key = optional_key("serial_key", options.serial_key)
    limit = limits.Limit(spec.limit_key, spec.limit_size, spec.limit_rate)
    concurrency_key = optional_key("concurrency_key", options.concurrency_key)
    if concurrency_key is not None:
        limit = limits.keyed(limit, concurrency_key, cfg)
    limits.check_serial(limit, serial_key)
    return replace(
        spec,
        run_at=run_at,
        delay=delay,
        dedupe_key=optional_key("dedupe_key", options.dedupe_key),
        serial_key=serial_key,
        limit_key=limit.key,
        limit_size=limit.size,
        limit_rate=limit.rate,
        subject_type_id=subject_type_id,
        subject_id=subject_id,
        after=dependency_ids(options.after),
        on_dependency_failure=on_dependency_failure(options),
    )


def dependency_ids(after: Sequence[Job | int] | None) -> tuple[int, ...]:
    """The ids of ``after`` (jobs or ids), in order, each once."""
    if after is None:
        return ()
    if isinstance(after, (str, bytes, Job, int)) or not isinstance(after, Sequence):
        raise InvalidJob(f"after must be a list of jobs or job ids, not {after!r}.")
    ids: dict[int, None] = {}
    for item in after:
        job_id = item.pk if isinstance(item, Job) else item
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
            raise InvalidJob(f"after: {item!r} is not a saved job or a job id.")
        ids[job_id] = None
    return tuple(ids)


def on_dependency_failure(options: EnqueueOptions) -> str:
    """The call's ``on_dependency_failure``: ``"cancel"`` (the default) or ``"run"``."""
    policy = options.on_dependency_failure
    if policy is None:
        return OnFailure.CANCEL
    if policy not in OnFailure.values:
        raise InvalidJob(
            f"on_dependency_failure must be one of {', '.join(OnFailure.values)}, not {policy!r}."
        )
    if not options.after:
        raise InvalidJob("on_dependency_failure needs after=[...]: the jobs it is about.")
    return OnFailure(policy)


def schedule(options: EnqueueOptions) -> tuple[datetime | None, float]:
    """``(run_at, delay_seconds)``: an explicit time, or a delay from the database clock."""
    if options.run_at is not None and options.delay is not None:
        raise InvalidJob("Pass either run_at or delay, not both.")
    if options.run_at is not None:
        if not isinstance(options.run_at, datetime):
            raise InvalidJob(f"run_at must be a datetime, not {options.run_at!r}.")
        if settings.USE_TZ and timezone.is_naive(options.run_at):
            raise InvalidJob(
                f"run_at {options.run_at!r} is naive but USE_TZ is on. "
                "Pass an aware datetime, e.g. timezone.now() + timedelta(...)."
            )
        if not settings.USE_TZ and timezone.is_aware(options.run_at):
            raise InvalidJob(
                f"run_at {options.run_at!r} is aware but USE_TZ is off; pass it naive."
            )
        return options.run_at, 0.0
    delay = options.delay or 0
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if not durations.is_seconds(seconds, zero=True):
        raise InvalidJob(
            f"delay must be seconds (int or float) or a timedelta, from 0 to "
            f"{durations.MAX_DELAY.days} days; not {delay!r}."
        )
    return None, float(seconds)


def optional_key(name: str, key: object) -> str | None:
    """A ``dedupe_key``/``serial_key``: ``None``, or a string of 1-255 characters every
    database stores (``check_text``)."""
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= 255:
        raise InvalidJob(f"{name} must be a string of 1-255 characters, not {key!r}.")
    return check_text(name, key)


def subject_columns(subject: models.Model | None) -> tuple[int | None, str | None]:
    """``(content type id, primary key)`` of the business object behind the job."""
    if subject is None:
        return None, None
    if not isinstance(subject, models.Model) or subject.pk is None:
        raise InvalidJob(f"subject must be a saved model instance, not {subject!r}.")
    subject_id = check_text("subject's primary key", str(subject.pk))
    content_type = ContentType.objects.get_for_model(subject, for_concrete_model=False)
    return content_type.pk, subject_id


@functools.cache
def job_columns() -> tuple[str, ...]:
    """The job table's columns, by the attnames ``Job`` instances hold them under."""
    return tuple(field.attname for field in Job._meta.concrete_fields)


def built_jobs(alias: str, shape: Shape, calls: list[Call], rows: list[sql.Row]) -> list[Job]:
    """The ``Job`` instances of inserted rows (``id, created_at, run_at``), without reading them.

    Each is the instance a query would return (``Job.loaded``): every column
    given, from the shape's columns and the row's own. Rows of one statement
    share their timestamps, so a row may leave them ``NULL`` after the first
    (lowest id); each distinct one is converted once.
    """
    # Ids grow in input order; RETURNING order is not promised everywhere.
    if len(rows) > 1:
        rows = sorted(rows, key=operator.itemgetter("id"))
    converted: dict[object, datetime] = {}
    created_at = run_at = None
    columns = []
    for (args, kwargs), row in zip(calls, rows, strict=True):
        if row["created_at"] is not None:
            created_at = timestamp(converted, row["created_at"])
            run_at = timestamp(converted, row["run_at"])
        columns.append(
            {
                **shape.columns,
                "id": row["id"],
                "args": list(args),
                "kwargs": dict(kwargs),
                "errors": [],
                "created_at": created_at,
                "run_at": run_at,
            }
        )
    return Job.loaded(alias, columns)


def timestamp(converted: dict[object, datetime], value: object) -> datetime:
    """``sql.to_datetime(value)``, converted once per distinct ``value`` (kept in ``converted``)."""
    if value not in converted:
        converted[value] = sql.to_datetime(value)
    return converted[value]


def on_save(
    model: type[models.Model],
    task: Enqueueable,
    *,
    when: Callable[[Any, bool], bool] | None = None,
    args: Callable[[Any], Sequence[Any]] | None = None,
    kwargs: Callable[[Any], dict[str, Any]] | None = None,
    dedupe_key: Callable[[Any], str] | None = None,
) -> Callable[..., None]:
    """Enqueue ``task`` whenever a ``model`` instance is saved and ``when(obj, created)`` holds.

    Runs from ``post_save``, so inside the save's transaction: the job commits
    or rolls back with the row. The job's subject is the saved object; its
    arguments are ``args(obj)`` and ``kwargs(obj)`` (default: the object's
    primary key). Fixture loading (``raw`` saves) enqueues nothing. Returns
    the connected receiver, for ``post_save.disconnect``.
    """

    def enqueue_on_save(
        sender: type[models.Model], instance: Any, created: bool, raw: bool = False, **_: Any
    ) -> None:
        if raw or (when is not None and not when(instance, created)):
            return
        call = task.using(subject=instance, dedupe_key=dedupe_key(instance) if dedupe_key else None)
        call.enqueue(
            *(args(instance) if args else (instance.pk,)),
            **(kwargs(instance) if kwargs else {}),
        )

    post_save.connect(
        enqueue_on_save,
        sender=model,
        weak=False,
        dispatch_uid=f"django_dbqueue.on_save:{model._meta.label}:{task.name}",
    )
    return enqueue_on_save
