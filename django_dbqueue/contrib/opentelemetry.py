"""OpenTelemetry traces from where a job is enqueued to every attempt of it (the ``otel`` extra).

One line turns both sides on::

    DBQUEUE = {"MIDDLEWARE": ["django_dbqueue.contrib.opentelemetry.TracingMiddleware"]}

- **Enqueue** (``TracingMiddleware.enqueued``, in the caller's thread and
  transaction): a ``send <queue>`` span of kind PRODUCER, child of the current
  span (the web request's, say), started and ended around nothing but the
  hook; its context goes into the job's ``meta`` under ``"otel"`` through the
  globally configured propagator (W3C ``traceparent``/``tracestate`` by
  default). The span is what the job's trace hangs from, so a job enqueued
  where no span is active still starts a trace of its own. Never the task's
  arguments, which the hook is not given.
- **Attempt** (``TracingMiddleware.__call__``, in the job's thread): a
  ``process <queue>`` span of kind CONSUMER, child of the enqueue's span, so
  the job shows in the request's trace. The messaging conventions link a
  consumer's span to each message it processes because a batch has no one
  parent; an attempt runs exactly one job, which they allow to be the parent,
  and a link to the parent itself would say nothing more (it cost 14 % of the
  middleware's time in the benchmark).

Spans follow OpenTelemetry's messaging semantic conventions (``messaging.*``)
plus ``dbqueue.*`` attributes; a failed attempt has its exception recorded and
the status ERROR. The attempt's final outcome (``retried``, ``dead``) is
written after the middleware returns, so the span says what the attempt did:
``dbqueue.outcome`` is ``succeeded`` or ``failed``, and ``dbqueue.error_code``
the code the job's history records (``middleware.error_code``).

Spans go to the globally configured tracer provider (``trace.set_tracer_provider``,
as OpenTelemetry's SDK documents); without one the API's no-op tracer makes no
span and the enqueue stores only a context some other tool made current, or
nothing. A carrier past ``CARRIER_LIMIT`` bytes (a large baggage) is cut to its
``traceparent``, with a warning, so tracing never makes an enqueue fail.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_dbqueue import jsontext
from django_dbqueue.context import JobContext
from django_dbqueue.errors import ErrorInfo
from django_dbqueue.middleware import AttemptCall, Enqueueing, error_code

INSTALL_HINT = (
    "django_dbqueue.contrib.opentelemetry needs the OpenTelemetry API and SDK: "
    'pip install "django-dbqueue[otel]".'
)

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImproperlyConfigured(INSTALL_HINT) from exc

log = logging.getLogger(__name__)

#: ``messaging.system``: the queue, as OpenTelemetry's messaging conventions name a system.
SYSTEM = "django_dbqueue"
#: The key of ``Job.meta`` that holds the enqueue's trace context (the propagator's carrier).
META_KEY = "otel"
#: The longest carrier kept whole, as JSON, in bytes (``meta`` holds at most 4096).
CARRIER_LIMIT = 1024

#: Resolves to the configured provider's tracer once there is one (a proxy until then).
_tracer = trace.get_tracer(__name__)


class TracingMiddleware:
    """Runs each attempt in a ``process <queue>`` CONSUMER span; ``enqueued`` traces the enqueue.

    Attributes of the attempt's span: ``messaging.system`` (``django_dbqueue``),
    ``messaging.operation.type`` and ``messaging.operation.name`` (``process``),
    ``messaging.destination.name`` (the queue), ``messaging.message.id`` (the job
    id), ``messaging.client.id`` (the worker id), ``dbqueue.task``,
    ``dbqueue.attempt``, ``dbqueue.max_attempts``, ``dbqueue.outcome``
    (``succeeded``/``failed``); on failure also ``dbqueue.error_code`` and
    ``error.type`` (the exception's class path), the exception as an
    ``exception`` event (type, message and stack trace as the job's history
    records them) and the status ERROR. What the chain raises or returns passes
    on unchanged; a ``meta["otel"]`` that is not a mapping is ignored.
    """

    def __init__(self, call_next: AttemptCall) -> None:
        self.call_next = call_next

    def __call__(self, context: JobContext) -> object:
        carrier = context.meta.get(META_KEY)
        created = propagate.extract(carrier if isinstance(carrier, Mapping) else {})
        with _tracer.start_as_current_span(
            f"process {context.queue}",
            context=created,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": context.queue,
                "messaging.message.id": str(context.job_id),
                "messaging.client.id": context.worker_id,
                "dbqueue.task": context.task,
                "dbqueue.attempt": context.attempt,
                "dbqueue.max_attempts": context.max_attempts,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = self.call_next(context)
            except BaseException as exc:
                _record_failure(span, ErrorInfo.from_exception(exc, error_code(context, exc)))
                raise
            span.set_attribute("dbqueue.outcome", "succeeded")
            return result

    @staticmethod
    def enqueued(enqueueing: Enqueueing) -> Mapping[str, Any] | None:
        """The enqueue hook: a ``send <queue>`` PRODUCER span, and its context for ``meta``.

        Attributes: ``messaging.system``, ``messaging.operation.type`` and
        ``messaging.operation.name`` (``send``), ``messaging.destination.name``,
        ``dbqueue.task``, and ``messaging.batch.message_count`` for a bulk
        enqueue. Returns ``{"otel": carrier}``, or ``None`` when the propagator
        wrote nothing (no tracer provider and no current span).
        """
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": enqueueing.queue,
            "dbqueue.task": enqueueing.task,
        }
        if enqueueing.count > 1:
            attributes["messaging.batch.message_count"] = enqueueing.count
        span = _tracer.start_span(
            f"send {enqueueing.queue}", kind=SpanKind.PRODUCER, attributes=attributes
        )
        carrier: dict[str, str] = {}
        try:
            propagate.inject(carrier, context=trace.set_span_in_context(span))
        finally:
            span.end()
        kept = _bounded(carrier, enqueueing)
        return {META_KEY: kept} if kept else None


def _record_failure(span: trace.Span, error: ErrorInfo) -> None:
    """The failed attempt on its span: outcome, codes, the exception event, status ERROR.

    From ``error`` (``ErrorInfo``, which never raises) rather than the exception:
    its ``__str__`` is task code's and may raise, which ``record_exception``
    would pass on, turning the task's failure into the middleware's.
    """
    span.set_attributes(
        {
            "dbqueue.outcome": "failed",
            "dbqueue.error_code": error.code,
            "error.type": error.exception,
        }
    )
    span.add_event(
        "exception",
        {
            "exception.type": error.exception,
            "exception.message": error.message,
            "exception.stacktrace": error.traceback,
        },
    )
    span.set_status(Status(StatusCode.ERROR, error.message))


def _bounded(carrier: dict[str, str], enqueueing: Enqueueing) -> dict[str, str]:
    """``carrier``, or only its ``traceparent`` when it is longer than ``CARRIER_LIMIT``."""
    size = len(jsontext.dumps(carrier).encode())
    if size <= CARRIER_LIMIT:
        return carrier
    log.warning(
        "task=%s: the trace context is %s bytes (baggage?), more than the %s kept; "
        "its job keeps the traceparent only",
        enqueueing.task,
        size,
        CARRIER_LIMIT,
    )
    return {key: value for key, value in carrier.items() if key == "traceparent"}
