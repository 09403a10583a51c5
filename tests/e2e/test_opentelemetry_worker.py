"""``django_dbqueue.contrib.opentelemetry`` in a real ``runworkers`` process: the attempt's span
joins the trace of the web request that enqueued the job.

The request runs here (the SDK's in-memory exporter); the worker writes its
spans to a file (``DBQUEUE_SPANS_FILE``, ``tests.e2e.tracing``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.test import Client
from opentelemetry import trace
from pytest_django import Settings

from django_dbqueue import middleware
from django_dbqueue.models import Job, JobState
from tests import tracing
from tests.e2e.conftest import WorkerProcess
from tests.jobs import tasks

StartWorker = Callable[..., WorkerProcess]
TRACING = "django_dbqueue.contrib.opentelemetry.TracingMiddleware"

e2e_db = pytest.mark.django_db(transaction=True)


@pytest.fixture
def traced(settings: Settings) -> Iterator[None]:
    """``TracingMiddleware`` here too, so the request's enqueue is traced."""
    tracing.in_memory().clear()
    settings.DBQUEUE = {**getattr(settings, "DBQUEUE", {}), "MIDDLEWARE": [TRACING]}
    yield
    middleware.stack.cache_clear()


@e2e_db
@pytest.mark.usefixtures("traced")
def test_the_workers_span_joins_the_trace_of_the_request_that_enqueued(
    start_worker: StartWorker, client: Client, tmp_path: Path
) -> None:
    response = client.post("/checkout/").json()
    failing = tasks.permanent.enqueue()
    (send,) = [s for s in tracing.in_memory().get_finished_spans() if s.name == "send mail"]
    spans_file = tmp_path / "worker-spans.jsonl"
    worker = start_worker(
        "--burst", settings={"MIDDLEWARE": [TRACING]}, env={"DBQUEUE_SPANS_FILE": str(spans_file)}
    )
    assert worker.wait() == 0
    assert Job.objects.get(pk=response["job"]).state == JobState.SUCCEEDED
    spans = {span["name"]: span for span in tracing.read_json_lines(spans_file)}
    assert set(spans) == {"process mail", "process default"}
    process = spans["process mail"]
    assert process["kind"] == "SpanKind.CONSUMER"
    assert process["context"]["trace_id"] == f"0x{response['trace_id']}"
    assert process["parent_id"] == f"0x{trace.format_span_id(send.get_span_context().span_id)}"
    assert process["attributes"] == {
        "messaging.system": "django_dbqueue",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "mail",
        "messaging.message.id": str(response["job"]),
        "messaging.client.id": process["attributes"]["messaging.client.id"],
        "dbqueue.task": "tests.jobs.tasks.send_invoice",
        "dbqueue.attempt": 1,
        "dbqueue.max_attempts": 3,
        "dbqueue.outcome": "succeeded",
    }
    assert process["status"]["status_code"] == "UNSET"
    dead = spans["process default"]
    assert dead["attributes"]["messaging.message.id"] == str(failing.pk)
    assert (dead["attributes"]["dbqueue.outcome"], dead["attributes"]["dbqueue.error_code"]) == (
        "failed",
        "PERMANENT_ERROR",
    )
    assert dead["status"]["status_code"] == "ERROR"
    assert [event["name"] for event in dead["events"]] == ["exception"]
    assert dead["events"][0]["attributes"]["exception.type"] == (
        "django_dbqueue.exceptions.PermanentError"
    )
    assert dead["parent_id"] is not None  # its enqueue's own send span, in a trace of its own
