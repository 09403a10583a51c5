"""``django_dbqueue.contrib.opentelemetry``: the enqueue's PRODUCER span and each attempt's
CONSUMER span, in the web request's trace, with the SDK's in-memory exporter.

Attempts run in this process (``run_jobs``); the worker-process side is
``tests/e2e/test_opentelemetry_worker.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pytest_django import Settings

from django_dbqueue import middleware
from django_dbqueue.contrib.opentelemetry import CARRIER_LIMIT, META_KEY
from django_dbqueue.errors import MIDDLEWARE_FAILED, UNPRINTABLE
from django_dbqueue.models import Job, JobState
from django_dbqueue.testing import run_jobs
from tests import tracing
from tests.jobs import execute_tasks, tasks

TRACING = "django_dbqueue.contrib.opentelemetry.TracingMiddleware"

pytestmark = pytest.mark.django_db

tracer = trace.get_tracer(__name__)


@pytest.fixture
def spans(settings: Settings) -> Iterator[InMemorySpanExporter]:
    """The exporter, emptied, with ``TracingMiddleware`` configured (outermost)."""
    exporter = tracing.in_memory()
    exporter.clear()
    settings.DBQUEUE = {**getattr(settings, "DBQUEUE", {}), "MIDDLEWARE": [TRACING]}
    yield exporter
    middleware.stack.cache_clear()


def only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = [span for span in exporter.get_finished_spans() if span.name == name]
    return span


def ran(job: Job) -> Job:
    run_jobs()
    return Job.objects.get(pk=job.pk)


def test_the_attempt_shares_the_trace_of_the_request_that_enqueued_it(
    spans: InMemorySpanExporter, client: Client
) -> None:
    response = client.post("/checkout/").json()
    job = ran(Job.objects.get(pk=response["job"]))
    assert job.state == JobState.SUCCEEDED
    request, send, process = (only(spans, n) for n in ("checkout", "send mail", "process mail"))
    assert trace.format_trace_id(process.context.trace_id) == response["trace_id"]
    assert send.kind == SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == request.context.span_id
    assert process.kind == SpanKind.CONSUMER
    assert process.parent is not None
    assert process.parent.span_id == send.context.span_id
    assert not process.links
    assert dict(send.attributes or {}) == {
        "messaging.system": "django_dbqueue",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "mail",
        "dbqueue.task": "tests.jobs.tasks.send_invoice",
    }
    assert dict(process.attributes or {}) == {
        "messaging.system": "django_dbqueue",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "mail",
        "messaging.message.id": str(job.pk),
        "messaging.client.id": process.attributes["messaging.client.id"],
        "dbqueue.task": "tests.jobs.tasks.send_invoice",
        "dbqueue.attempt": 1,
        "dbqueue.max_attempts": 3,
        "dbqueue.outcome": "succeeded",
    }
    assert process.status.status_code == StatusCode.UNSET
    assert not process.events


def test_the_job_keeps_the_trace_context_and_never_the_arguments(
    spans: InMemorySpanExporter,
) -> None:
    with tracer.start_as_current_span("caller"):
        job = tasks.send_invoice.enqueue(4242)
    send = only(spans, "send mail")
    carrier = job.meta[META_KEY]
    assert carrier == {"traceparent": traceparent(send)}
    assert Job.objects.get(pk=job.pk).meta == job.meta
    assert "4242" not in str(job.meta)


def test_a_failed_attempt_records_its_exception_and_the_jobs_error_code(
    spans: InMemorySpanExporter,
) -> None:
    job = ran(tasks.flaky.enqueue("the mail server is down"))
    assert (job.state, job.last_error_code) == (JobState.READY, "ConnectionError")
    process = only(spans, "process default")
    attributes = process.attributes or {}
    assert (attributes["dbqueue.outcome"], attributes["dbqueue.error_code"]) == (
        "failed",
        "ConnectionError",
    )
    assert attributes["error.type"] == "builtins.ConnectionError"
    assert process.status.status_code == StatusCode.ERROR
    assert process.status.description == "ConnectionError: the mail server is down"
    (event,) = process.events
    assert event.name == "exception"
    event_attributes = event.attributes or {}
    assert event_attributes["exception.type"] == "builtins.ConnectionError"
    assert event_attributes["exception.message"] == "ConnectionError: the mail server is down"
    assert "tests/jobs/tasks.py" in str(event_attributes["exception.stacktrace"])


def test_an_exception_whose_str_raises_is_recorded_and_stays_the_tasks(
    spans: InMemorySpanExporter,
) -> None:
    job = ran(execute_tasks.raises_unprintable.enqueue())
    assert (job.state, job.last_error_code) == (JobState.DEAD, "PERMANENT_ERROR")
    process = only(spans, "process default")
    assert (process.attributes or {})["dbqueue.error_code"] == "PERMANENT_ERROR"
    assert process.status.description == f"Unprintable: {UNPRINTABLE}"


def test_the_error_code_is_the_one_the_job_records(
    spans: InMemorySpanExporter, settings: Settings
) -> None:
    permanent = ran(tasks.permanent.enqueue())
    settings.DBQUEUE = {**settings.DBQUEUE, "MIDDLEWARE": [TRACING, "tests.jobs.middleware.raises"]}
    failing = ran(tasks.noop.enqueue())
    codes = {
        span.attributes["messaging.message.id"]: span.attributes["dbqueue.error_code"]
        for span in spans.get_finished_spans()
        if span.kind == SpanKind.CONSUMER and span.attributes
    }
    assert codes == {
        str(permanent.pk): permanent.last_error_code,
        str(failing.pk): failing.last_error_code,
    }
    assert (permanent.last_error_code, failing.last_error_code) == (
        "PERMANENT_ERROR",
        MIDDLEWARE_FAILED,
    )


def test_each_attempt_of_a_job_is_a_span_in_the_same_trace(spans: InMemorySpanExporter) -> None:
    job = tasks.flaky.enqueue("down")
    for _ in range(2):
        Job.objects.filter(pk=job.pk).update(run_at=Job.objects.get(pk=job.pk).created_at)
        run_jobs()
    send = only(spans, "send default")
    attempts = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER]
    assert [s.attributes["dbqueue.attempt"] for s in attempts if s.attributes] == [1, 2]
    assert {(s.context.trace_id, s.parent.span_id) for s in attempts if s.parent} == {
        (send.context.trace_id, send.context.span_id)
    }


def test_a_bulk_enqueue_is_one_send_span_every_job_hangs_from(
    spans: InMemorySpanExporter,
) -> None:
    jobs = tasks.send_invoice.enqueue_many([((n,), {}) for n in range(3)])
    run_jobs()
    send = only(spans, "send mail")
    assert (send.attributes or {})["messaging.batch.message_count"] == 3
    assert send.parent is None  # no span was active: the enqueue starts the job's trace
    processed = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CONSUMER]
    assert sorted(s.attributes["messaging.message.id"] for s in processed if s.attributes) == (
        sorted(str(job.pk) for job in jobs)
    )
    assert {s.parent.span_id for s in processed if s.parent} == {send.context.span_id}


def test_a_trace_context_too_large_for_the_job_is_cut_to_its_traceparent(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    token = context.attach(baggage.set_baggage("cart", "x" * CARRIER_LIMIT))
    try:
        job = tasks.send_invoice.enqueue(1)
    finally:
        context.detach(token)
    send = only(spans, "send mail")
    assert job.meta == {META_KEY: {"traceparent": traceparent(send)}}
    assert "its job keeps the traceparent only" in caplog.text


def traceparent(span: ReadableSpan) -> str:
    """The W3C ``traceparent`` of ``span``."""
    ids = span.get_span_context()
    return (
        f"00-{trace.format_trace_id(ids.trace_id)}-{trace.format_span_id(ids.span_id)}"
        f"-{ids.trace_flags:02x}"
    )
