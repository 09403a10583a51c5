"""Writing jobs: validation first, then one INSERT in the caller's transaction."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import connections, models
from django.db.models.signals import post_save
from django.utils import timezone

from django_dbqueue import conf, durations, jsontext, sql, wakeups
from django_dbqueue.exceptions import ArgumentNotJSON, DbQueueError, InvalidJob
from django_dbqueue.models import Job, JobState
from django_dbqueue.validation import INT_MIN, check_binds, check_importable, check_int, check_queue

if TYPE_CHECKING:
    from django_dbqueue.tasks import Task

Call = tuple[Sequence[Any], dict[str, Any]]

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
}


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


def enqueue(task: Task[..., Any], calls: list[Call], options: EnqueueOptions) -> list[Job]:
    """Validate, then insert one job per call in one statement; jobs in input order.

    Runs in the caller's transaction on the queue's database, if any. Raises
    ``InvalidJob`` before writing anything when an argument or option is bad.
    """
    if not calls:
        return []
    check_importable(task.name, object, lambda found: found is task)
    cfg = conf.get()
    spec = job_spec(task, options, cfg)
    return insert(spec, calls, encode_calls(task, calls), cfg)


def insert(
    spec: JobSpec, calls: list[Call], rows: str, cfg: conf.QueueSettings | None = None
) -> list[Job]:
    """Insert one job per call (``rows``: the calls as JSON) in the caller's transaction.

    A ``dedupe_key`` an active job of the same task holds returns that job,
    unchanged, with ``deduplicated=True``. Workers are woken at commit, once
    per queue and transaction (``wakeups``).
    """
    cfg = cfg or conf.get()
    connection = connections[cfg.database]
    params = {
        **vars(spec),
        "rows": rows,
        "channel": cfg.notify_channel,
        "notify": wakeups.needs_notify(connection, spec.queue),
    }
    statement = (
        "insert_job" if len(calls) == 1 and sql.defines(connection, "insert_job") else "insert_jobs"
    )
    for _ in range(DEDUPE_TRIES):
        # Ids grow in input order; RETURNING order is not promised everywhere.
        inserted = sorted(sql.run(connection, statement, params), key=lambda row: row["id"])
        if inserted:
            jobs = built_jobs(connection.alias, spec, calls, inserted)
            wakeups.announce(connection, spec.queue, [job.pk for job in jobs])
            return jobs
        existing = (
            Job.objects.using(connection.alias)
            .active()
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


def job_spec(task: Task[..., Any], options: EnqueueOptions, cfg: conf.QueueSettings) -> JobSpec:
    """The validated column values every job of this call shares."""
    queue = options.queue if options.queue is not None else task.options.queue or cfg.default_queue
    priority = options.priority if options.priority is not None else task.options.priority
    subject_type_id, subject_id = subject_columns(options.subject)
    run_at, delay = schedule(options)
    return JobSpec(
        task=task.name,
        queue=check_queue(queue, cfg.queues),
        priority=check_int("priority", priority, INT_MIN),
        run_at=run_at,
        delay=delay,
        max_attempts=task.options.max_attempts or cfg.max_attempts,
        # The column holds whole seconds; a lease is never shorter than asked for.
        lease_seconds=math.ceil(task.options.lease or cfg.lease_seconds),
        dedupe_key=optional_key("dedupe_key", options.dedupe_key),
        serial_key=optional_key("serial_key", options.serial_key),
        subject_type_id=subject_type_id,
        subject_id=subject_id,
    )


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
    """A ``dedupe_key``/``serial_key``: ``None``, or a string of 1-255 characters."""
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= 255:
        raise InvalidJob(f"{name} must be a string of 1-255 characters, not {key!r}.")
    if "\x00" in key:
        raise InvalidJob(
            f"{name} {key!r} holds the NUL character (\\x00), which PostgreSQL cannot store. "
            "Leave it out of the key."
        )
    return key


def subject_columns(subject: models.Model | None) -> tuple[int | None, str | None]:
    """``(content type id, primary key)`` of the business object behind the job."""
    if subject is None:
        return None, None
    if not isinstance(subject, models.Model) or subject.pk is None:
        raise InvalidJob(f"subject must be a saved model instance, not {subject!r}.")
    content_type = ContentType.objects.get_for_model(subject, for_concrete_model=False)
    return content_type.pk, str(subject.pk)


def encode_calls(task: Task[..., Any], calls: list[Call]) -> str:
    """The calls as one JSON array of ``{"args", "kwargs"}``; refuses what cannot bind or encode."""
    encoded = []
    limit = conf.get().max_args_bytes
    for position, (args, kwargs) in enumerate(calls):
        where = f"{task.name} (call {position})" if len(calls) > 1 else task.name
        leading = 1 if task.options.takes_context else 0
        check_binds(where, task.signature, args, kwargs, leading=leading)
        text = encode_call(where, list(args), kwargs)
        # ASCII (json escapes the rest), so characters are bytes.
        if limit and len(text) > limit:
            raise InvalidJob(
                f"{where}: the arguments take {len(text)} bytes as JSON, more than "
                f"DBQUEUE['MAX_ARGS_BYTES'] ({limit}). Store large data in a row or a file "
                "and pass its id."
            )
        encoded.append(text)
    return "[" + ",".join(encoded) + "]"


def encode_call(where: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    """One call as JSON text; ``InvalidJob`` naming the argument JSON cannot hold.

    An argument of a type JSON has no place for (a ``datetime``, a dict key that
    is not a string) raises ``ArgumentNotJSON``, also a ``TypeError``, as
    ``django.tasks`` documents; NaN, infinity, NUL characters and values nested
    too deep a plain ``InvalidJob``.
    """
    named = [(f"argument {i}", value) for i, value in enumerate(args)]
    named += [(f"argument {name!r}", value) for name, value in kwargs.items()]
    for label, value in named:
        try:
            jsontext.check_argument(value)
        except (TypeError, ValueError) as exc:
            raise refused(f"{where}: {label} {exc}.", exc) from exc
    try:
        return jsontext.dumps({"args": args, "kwargs": kwargs})
    except (TypeError, ValueError) as exc:
        culprit = next((label for label, value in named if not is_json(value)), "an argument")
        raise refused(
            f"{where}: {culprit} is not JSON-serializable ({exc}). Pass JSON values "
            "(str, int, float, bool, None, list, dict), such as an id instead of an object.",
            exc,
        ) from exc


def refused(message: str, exc: Exception) -> InvalidJob:
    """The error for an argument JSON refused with ``exc``: ``ArgumentNotJSON`` for a type."""
    return (ArgumentNotJSON if isinstance(exc, TypeError) else InvalidJob)(message)


def is_json(value: object) -> bool:
    try:
        jsontext.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def built_jobs(alias: str, spec: JobSpec, calls: list[Call], rows: list[sql.Row]) -> list[Job]:
    """The ``Job`` instances of inserted rows (``id, created_at, run_at``), without reading them.

    Each is built with ``Model.from_db``, as a query would build it: every
    column given, in order. The columns the calls share are laid out once.
    """
    columns = [field.attname for field in Job._meta.concrete_fields]
    shared = {
        **FRESH_COLUMNS,
        "queue": spec.queue,
        "task": spec.task,
        "priority": spec.priority,
        "max_attempts": spec.max_attempts,
        "lease_seconds": spec.lease_seconds,
        "dedupe_key": spec.dedupe_key,
        "serial_key": spec.serial_key,
        "subject_type_id": spec.subject_type_id,
        "subject_id": spec.subject_id,
        "backend": spec.backend,
    }
    template = [shared.get(column) for column in columns]
    position = {column: index for index, column in enumerate(columns)}
    # Rows of one statement share their timestamps: convert each distinct one once.
    timestamps: dict[object, datetime] = {}
    jobs = []
    for (args, kwargs), row in zip(calls, rows, strict=True):
        values = list(template)
        values[position["id"]] = row["id"]
        values[position["args"]] = list(args)
        values[position["kwargs"]] = dict(kwargs)
        values[position["errors"]] = []
        for column in ("created_at", "run_at"):
            value = row[column]
            if value not in timestamps:
                timestamps[value] = sql.to_datetime(value)
            values[position[column]] = timestamps[value]
        jobs.append(Job.from_db(alias, columns, values))
    return jobs


def on_save(
    model: type[models.Model],
    task: Task[..., Any],
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
