"""``@task``: turn a module-level function into a job the queue can run.

A ``Task`` stays callable (calling it runs the function here and now);
``enqueue()`` and ``using(...).enqueue()`` write a job instead.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    TypeVar,
    overload,
)

from django.db.models import Model

from django_dbqueue import conf, enqueue, limits, registry
from django_dbqueue.arguments import Callee
from django_dbqueue.enqueue import EnqueueOptions
from django_dbqueue.exceptions import InvalidJob
from django_dbqueue.retry import Backoff
from django_dbqueue.validation import (
    INT_MIN,
    check_int,
    check_queue_name,
    check_seconds,
    import_task,
)
from django_dbqueue.workflows import Step

if TYPE_CHECKING:
    from django_dbqueue.context import JobContext
    from django_dbqueue.models import Job

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class TaskOptions:
    """What ``@task(...)`` fixes for every job of a task; ``None`` means the setting."""

    queue: str | None = None
    priority: int = 0
    max_attempts: int | None = None
    lease: float | None = None
    timeout: float | None = None
    retry: Backoff | None = None
    give_up_on: tuple[type[BaseException], ...] = ()
    takes_context: bool = False
    #: The most jobs of this task running at once, across every worker (``limits``).
    concurrency: int | None = None
    #: The most jobs of this task starting, as a rate (``"100/m"``), across every worker.
    rate: str | None = None


class Task(Generic[P, R]):
    """A function registered as a background task.

    ``name`` is the import path workers use to find the function again, so
    tasks must be module-level functions.
    """

    def __init__(self, func: Callable[P, R], options: TaskOptions) -> None:
        validate_task_options(options)
        self.func = func
        self.options = options
        self.name = f"{func.__module__}.{func.__qualname__}"
        functools.update_wrapper(self, func)
        registry.register(self.name, options.queue)

    def __repr__(self) -> str:
        return f"<Task {self.name}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function now, in this process, with no job involved."""
        return self.func(*args, **kwargs)

    @property
    def backoff(self) -> Backoff:
        """The retry policy: the task's own, else the settings'."""
        return self.options.retry or conf.get().backoff

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.func)

    @functools.cached_property
    def is_coroutine(self) -> bool:
        """Whether the function is ``async def`` (the worker then runs it to the end itself)."""
        return inspect.iscoroutinefunction(self.func)

    @functools.cached_property
    def callee(self) -> Callee:
        """What enqueue checks the arguments against (``arguments.encode_calls``)."""
        return Callee(self.name, self.signature, 1 if self.options.takes_context else 0)

    def bind(
        self, args: Sequence[Any], kwargs: dict[str, Any], context: object = None
    ) -> inspect.BoundArguments:
        """Bind a job's arguments (and the context first, if the task takes it).

        Raises ``TypeError`` when they do not fit the function's signature.
        """
        leading = (context,) if self.options.takes_context else ()
        return self.signature.bind(*leading, *args, **kwargs)

    def arguments(
        self, args: Sequence[Any], kwargs: dict[str, Any], context: object = None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments of the job's call: ``bind``'s.

        Found without binding for the usual shape, plain parameters all given
        positionally (which always bind). Raises ``TypeError`` when they do
        not fit the function's signature.
        """
        leading = (context,) if self.options.takes_context else ()
        if not kwargs and len(leading) + len(args) == self._plain_arity:
            return (*leading, *args), {}
        bound = self.bind(args, kwargs, context)
        return bound.args, bound.kwargs

    @functools.cached_property
    def _plain_arity(self) -> int | None:
        """How many parameters the function has when each is positional, without a default."""
        plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        parameters = self.signature.parameters.values()
        if all(p.kind in plain and p.default is inspect.Parameter.empty for p in parameters):
            return len(parameters)
        return None

    def using(
        self,
        *,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        dedupe_key: str | None = None,
        subject: Model | None = None,
        serial_key: str | None = None,
        after: Sequence[Job | int] | None = None,
        on_dependency_failure: str | None = None,
        concurrency_key: str | None = None,
    ) -> TaskCall[P, R]:
        """Options for the next enqueue: scheduling, priority, queue, dedupe, subject, order.

        Jobs sharing a ``serial_key`` run one at a time, in enqueue order. A job
        enqueued ``after=[job_a, job_b]`` (jobs or ids, committed earlier or in
        this transaction) is ``waiting`` until each of them has succeeded, then
        ready; when one ends ``dead`` or ``cancelled`` it is cancelled too
        (``on_dependency_failure="cancel"``, code ``DEPENDENCY_FAILED``) or runs
        anyway once they have all finished (``"run"``: a ``finally`` step). Jobs
        sharing a ``concurrency_key`` run at most the task's ``concurrency`` at once and
        start at most at its ``rate`` (else ``DBQUEUE["KEY_CONCURRENCY"]``,
        ``["KEY_RATE"]``), across every worker (``limits``).
        """
        options = EnqueueOptions(
            delay,
            run_at,
            priority,
            queue,
            dedupe_key,
            subject,
            serial_key,
            after,
            on_dependency_failure,
            concurrency_key,
        )
        return TaskCall(self, options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Write a job for ``func(*args, **kwargs)``; see ``TaskCall.enqueue``."""
        return TaskCall(self, EnqueueOptions()).enqueue(*args, **kwargs)

    def step(self, *args: P.args, **kwargs: P.kwargs) -> Step:
        """This call as a step of a workflow (``chain``, ``group``), enqueued with it."""
        return Step(self, args, kwargs)

    def enqueue_many(self, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[Job]:
        """Write one job per ``(args, kwargs)`` in one INSERT; see ``TaskCall``."""
        return TaskCall(self, EnqueueOptions()).enqueue_many(calls)


@dataclass(frozen=True)
class TaskCall(Generic[P, R]):
    """A task with per-call options, ready to enqueue."""

    task: Task[P, R]
    options: EnqueueOptions

    def using(self, **changes: Any) -> TaskCall[P, R]:
        """The same call with more options changed."""
        return TaskCall(self.task, replace(self.options, **changes))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Write the job in the current transaction of the queue's database.

        Everything is validated first: a bad argument or option raises
        ``InvalidJob`` and writes nothing. With a ``dedupe_key`` that an unfinished
        job of this task already holds (waiting, ready or running), that job is
        returned unchanged with ``deduplicated=True``. Workers are woken when the
        transaction commits.
        """
        return enqueue.enqueue(self.task, [(args, kwargs)], self.options)[0]

    def step(self, *args: P.args, **kwargs: P.kwargs) -> Step:
        """This call, with these options, as a step of a workflow (``chain``, ``group``)."""
        return Step(self.task, args, kwargs, self.options)

    def enqueue_many(self, calls: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[Job]:
        """Write one job per ``(args, kwargs)`` with one INSERT; jobs in input order.

        All jobs share these options; ``dedupe_key`` is not accepted here.
        """
        if self.options.dedupe_key is not None:
            raise InvalidJob(
                f"{self.task.name}: enqueue_many() does not take a dedupe_key; "
                "enqueue those jobs one by one."
            )
        return enqueue.enqueue(self.task, list(calls), self.options)


@overload
def task(func: Callable[P, R], /) -> Task[P, R]: ...
@overload
def task(
    *,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    lease: float | None = None,
    timeout: float | None = None,
    retry: Backoff | None = None,
    give_up_on: Iterable[type[BaseException]] = (),
    takes_context: Literal[True],
    concurrency: int | None = None,
    rate: str | None = None,
) -> Callable[[Callable[Concatenate[JobContext, P], R]], Task[P, R]]: ...
@overload
def task(
    *,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    lease: float | None = None,
    timeout: float | None = None,
    retry: Backoff | None = None,
    give_up_on: Iterable[type[BaseException]] = (),
    takes_context: Literal[False] = False,
    concurrency: int | None = None,
    rate: str | None = None,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...
def task(  # type: ignore[misc]  # the implementation accepts both overloads' functions.
    func: Callable[P, R] | None = None,
    /,
    *,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    lease: float | None = None,
    timeout: float | None = None,
    retry: Backoff | None = None,
    give_up_on: Iterable[type[BaseException]] = (),
    takes_context: bool = False,
    concurrency: int | None = None,
    rate: str | None = None,
) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
    """Declare a background task: ``@task`` or ``@task(queue="mail", ...)``.

    ``max_attempts``, ``lease`` (seconds, rounded up to whole seconds) and ``retry`` default to the
    ``DBQUEUE`` settings when the job is enqueued or retried. ``give_up_on``
    exception types make a failure permanent. ``concurrency=N``: at most N jobs of
    the task run at once across every worker; ``rate="100/m"``: at most so many start
    (``limits``); per ``concurrency_key`` for jobs enqueued with one. Bad options
    raise ``InvalidJob`` at import time.
    """
    options = TaskOptions(
        queue,
        priority,
        max_attempts,
        lease,
        timeout,
        retry,
        tuple(give_up_on),
        takes_context,
        concurrency,
        rate,
    )

    def decorate(function: Callable[P, R]) -> Task[P, R]:
        return Task(function, options)

    return decorate if func is None else decorate(func)


def validate_task_options(options: TaskOptions) -> None:
    """Raise ``InvalidJob`` naming the first option that is out of range."""
    if options.queue is not None:
        check_queue_name(options.queue)
    check_int("priority", options.priority, INT_MIN)
    if options.max_attempts is not None:
        check_int("max_attempts", options.max_attempts, 1)
    if options.lease is not None:
        check_seconds("lease", options.lease)
    if options.timeout is not None:
        check_seconds("timeout", options.timeout)
    if options.concurrency is not None:
        limits.check_size("concurrency", options.concurrency)
    if options.rate is not None:
        limits.parse_rate("rate", options.rate)
    if options.retry is not None and not isinstance(options.retry, Backoff):
        raise InvalidJob(f"retry must be a Backoff(...), not {options.retry!r}.")
    for kind in options.give_up_on:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise InvalidJob(f"give_up_on takes exception classes, not {kind!r}.")


def load_task(path: str) -> Task[..., Any]:
    """The ``Task`` at import path ``path``; see ``validation.import_task``."""
    return import_task(path, Task, "a django_dbqueue @task")
