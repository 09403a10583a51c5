"""Middleware: code of the project's choosing around every attempt, and at every enqueue.

``DBQUEUE["MIDDLEWARE"]`` lists dotted paths of factories, in the style of
Django's ``MIDDLEWARE``. Each factory is called once per process with the next
callable and returns a callable of its own; both take the running job's
``JobContext`` and return the task's result, or raise::

    def timing(call_next):
        def middleware(context):
            started = time.monotonic()
            try:
                return call_next(context)
            finally:
                log.info("job %s took %.3fs", context.job_id, time.monotonic() - started)
        return middleware

The first listed is the outermost: it runs first and sees the result (or the
exception) last. Middleware runs in the job's own thread, inside the same guard
as task code (``worker.leftovers``), in a worker and in ``run_jobs`` alike.

What an attempt's outcome becomes:

- the task's own exception, passed on, is handled as if no middleware were
  there (retried with the task's backoff, dead for ``PermanentError``...);
- ``Retry``, ``PermanentError``, ``JobCancelled`` and ``LeaseLost`` mean the
  same from middleware as from the task (a rate-limiting middleware may
  ``raise Retry(delay=5)``);
- anything else a middleware raises (``BaseException`` included) fails the
  attempt with error code ``MIDDLEWARE_FAILED``, retried like a task failure,
  with the middleware's exception and traceback on the job;
- a middleware that swallows the task's exception and returns a value makes
  the attempt a success: the value is its result.

A factory with an ``enqueued`` attribute is also an enqueue hook:
``factory.enqueued(enqueueing)`` is called once per ``enqueue()`` call (a bulk
enqueue included), in the caller's thread and transaction, before anything is
written. It may return a mapping to add to the job's ``meta`` (what a tracer
needs to link the worker's span to the caller's: never the task's arguments,
which it is not given). The hooks' mappings, merged in list order, must be JSON
every database stores and at most ``MAX_META_BYTES`` long, or the enqueue raises
``InvalidJob`` and writes nothing. An exception a hook raises propagates to the
caller, like any exception of the enqueue; nothing is written.

With no middleware configured an attempt calls the task directly, and an
enqueue writes ``meta`` NULL: nothing is paid for what is not used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from django_dbqueue import conf, jsontext
from django_dbqueue.context import JobContext
from django_dbqueue.errors import MIDDLEWARE_FAILED, code_of
from django_dbqueue.exceptions import InvalidJob, JobCancelled, LeaseLost, PermanentError, Retry

#: What a middleware (and the task at the heart of the chain) is called as.
AttemptCall = Callable[[JobContext], object]
#: A ``DBQUEUE["MIDDLEWARE"]`` entry, imported: called once with the next callable.
Factory = Callable[[AttemptCall], AttemptCall]

#: The longest the hooks' ``meta`` may be, as JSON text, in bytes.
MAX_META_BYTES = 4096
#: Exceptions that mean the same raised by middleware as raised by the task.
QUEUE_SIGNALS = (Retry, PermanentError, JobCancelled, LeaseLost)


class MiddlewareFailed(Exception):
    """A middleware raised: the attempt fails with code ``MIDDLEWARE_FAILED``.

    The middleware's own exception is the ``__cause__``; it is what the job's
    history records.
    """


@dataclass(frozen=True)
class Enqueueing:
    """What an enqueue hook is told of the enqueue under way (never the arguments)."""

    #: The task's import path (``Job.task``).
    task: str
    #: The queue the jobs go to.
    queue: str
    #: How many jobs this call enqueues (1, or a bulk enqueue's count).
    count: int


@dataclass(frozen=True)
class Stack:
    """The configured middleware, built: the outermost callable and the enqueue hooks."""

    #: The outermost middleware; ``None`` when none is configured.
    outermost: AttemptCall | None
    hooks: tuple[Callable[[Enqueueing], Mapping[str, Any] | None], ...]


def factories(paths: Sequence[str]) -> list[Factory]:
    """Import each of ``paths``; raises ``ImportError`` naming the first that does not import,
    ``TypeError`` for one that is not callable (the system check ``dbqueue.E020`` says both
    first, at start)."""
    found: list[Factory] = []
    for path in paths:
        factory = import_string(path)
        if not callable(factory):
            raise TypeError(f"DBQUEUE['MIDDLEWARE'] entry {path!r} is not callable.")
        found.append(factory)
    return found


@functools.cache
def stack() -> Stack:
    """The middleware of ``DBQUEUE["MIDDLEWARE"]``, built once per process and settings.

    Call it at start (the worker does) so that a factory that raises stops the
    process there, loudly, instead of failing every attempt.
    """
    found = factories(conf.get().middleware)
    hooks = tuple(
        hook for hook in (getattr(factory, "enqueued", None) for factory in found) if callable(hook)
    )
    if not found:
        return Stack(outermost=None, hooks=hooks)
    call: AttemptCall = _call_task
    for factory in reversed(found):
        call = factory(call)
    return Stack(outermost=call, hooks=hooks)


@receiver(setting_changed)
def _forget_changed_settings(setting: str, **_: Any) -> None:
    if setting == "DBQUEUE":
        stack.cache_clear()


def run(context: JobContext, task_call: Callable[[], object]) -> object:
    """Call ``task_call`` (the task, arguments bound) through the middleware; its result.

    Raises what the task raised, a queue signal (``QUEUE_SIGNALS``) a
    middleware raised, or ``MiddlewareFailed`` for anything else a middleware
    raised (``BaseException`` included).
    """
    outermost = stack().outermost
    if outermost is None:
        return task_call()
    attempt = _TaskCall(task_call)
    context.attempt_call = attempt
    try:
        return outermost(context)
    except QUEUE_SIGNALS:
        raise
    except BaseException as exc:
        if exc is attempt.raised:
            raise
        raise MiddlewareFailed(f"middleware raised {type(exc).__name__}: {exc}") from exc
    finally:
        context.attempt_call = None


def error_code(context: JobContext, exc: BaseException) -> str:
    """The error code the attempt records for ``exc``, raised inside the outermost middleware.

    For a middleware to say what the job's history will: ``code_of(exc)`` for
    the task's own exception (``context``'s attempt raised it) and for a queue
    signal (``QUEUE_SIGNALS``), ``MIDDLEWARE_FAILED`` for anything else. Call
    it while the attempt runs (inside the middleware's call).
    """
    attempt = context.attempt_call
    if isinstance(exc, QUEUE_SIGNALS) or (isinstance(attempt, _TaskCall) and exc is attempt.raised):
        return code_of(exc)
    return MIDDLEWARE_FAILED


class _TaskCall:
    """The task's call for one attempt, and the exception it raised, if any."""

    __slots__ = ("call", "raised")

    def __init__(self, call: Callable[[], object]) -> None:
        self.call = call
        self.raised: BaseException | None = None


def _call_task(context: JobContext) -> object:
    """The heart of the chain: the task itself, with what it raises remembered as its own."""
    attempt = context.attempt_call
    if not isinstance(attempt, _TaskCall):
        raise RuntimeError(f"{context!r}: a middleware called the task outside its attempt.")
    try:
        return attempt.call()
    except BaseException as exc:
        attempt.raised = exc
        raise


def enqueue_meta(task: str, queue: str, count: int) -> dict[str, Any] | None:
    """What the enqueue hooks add to the jobs of one enqueue call; ``None`` when nothing.

    Raises ``InvalidJob`` when the merged mapping is not JSON every database
    stores or is longer than ``MAX_META_BYTES``; whatever a hook raises
    propagates. Either way before anything is written.
    """
    hooks = stack().hooks
    if not hooks:
        return None
    meta: dict[str, Any] = {}
    enqueueing = Enqueueing(task=task, queue=queue, count=count)
    for hook in hooks:
        added = hook(enqueueing)
        if added:
            meta.update(added)
    if not meta:
        return None
    try:
        text = jsontext.dumps(meta)
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"{task}: the enqueue hooks' meta is not storable JSON: {exc}") from exc
    if len(text.encode()) > MAX_META_BYTES:
        raise InvalidJob(
            f"{task}: the enqueue hooks' meta is {len(text.encode())} bytes of JSON; "
            f"at most {MAX_META_BYTES} are kept."
        )
    return meta
