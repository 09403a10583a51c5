"""Middleware factories the tests configure in ``DBQUEUE["MIDDLEWARE"]``."""

from __future__ import annotations

from typing import Any

from django_dbqueue import JobContext, Retry
from django_dbqueue.middleware import AttemptCall, Enqueueing

#: What ``outer`` and ``inner`` saw, in order.
TRACE: list[str] = []


def _traced(name: str, call_next: AttemptCall) -> AttemptCall:
    def middleware(context: JobContext) -> object:
        TRACE.append(f"{name}:before")
        try:
            return call_next(context)
        finally:
            TRACE.append(f"{name}:after")

    return middleware


def outer(call_next: AttemptCall) -> AttemptCall:
    return _traced("outer", call_next)


def inner(call_next: AttemptCall) -> AttemptCall:
    return _traced("inner", call_next)


def labels(call_next: AttemptCall) -> AttemptCall:
    """Wraps the result in what the middleware saw of the job: proof, in ``Job.result``, that it
    ran in a worker process, and in which order when listed twice."""

    def middleware(context: JobContext) -> object:
        return {
            "result": call_next(context),
            "task": context.task,
            "queue": context.queue,
            "meta": dict(context.meta),
        }

    return middleware


def raises(call_next: AttemptCall) -> AttemptCall:
    def middleware(context: JobContext) -> object:
        raise ValueError("the tracer is misconfigured")

    return middleware


def exits(call_next: AttemptCall) -> AttemptCall:
    def middleware(context: JobContext) -> object:
        raise SystemExit(3)

    return middleware


def asks_retry(call_next: AttemptCall) -> AttemptCall:
    def middleware(context: JobContext) -> object:
        raise Retry(delay=7)

    return middleware


def swallows(call_next: AttemptCall) -> AttemptCall:
    def middleware(context: JobContext) -> object:
        try:
            return call_next(context)
        except ConnectionError:
            return "recovered"

    return middleware


def breaks_at_start(call_next: AttemptCall) -> AttemptCall:
    raise RuntimeError("the middleware cannot start: no collector configured")


def _with_hook(hook: Any) -> Any:
    def factory(call_next: AttemptCall) -> AttemptCall:
        return call_next

    factory.enqueued = hook  # type: ignore[attr-defined]
    return factory


#: Every call of ``stamps_request.enqueued``, in order.
ENQUEUEINGS: list[Enqueueing] = []


def _stamp(enqueueing: Enqueueing) -> dict[str, Any]:
    ENQUEUEINGS.append(enqueueing)
    return {"request_id": "req-1", "hooked": [enqueueing.task, enqueueing.count]}


stamps_request = _with_hook(_stamp)
adds_more = _with_hook(lambda enqueueing: {"request_id": "req-2", "tenant": 7})
adds_nothing = _with_hook(lambda enqueueing: None)
oversized = _with_hook(lambda enqueueing: {"blob": "x" * 5000})
unstorable = _with_hook(lambda enqueueing: {"text": "a\x00b"})


def _raise(enqueueing: Enqueueing) -> dict[str, Any]:
    raise RuntimeError("the hook failed")


hook_raises = _with_hook(_raise)
