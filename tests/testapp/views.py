"""Views of the test project: a request that enqueues, as a project's checkout would."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from opentelemetry import trace

from tests.jobs import tasks
from tests.testapp.models import Order

tracer = trace.get_tracer(__name__)


def checkout(request: HttpRequest) -> JsonResponse:
    """Saves an order and enqueues its invoice in one transaction, inside a span of its own
    (what OpenTelemetry's Django instrumentation would start): the job's id, the span's ids."""
    with tracer.start_as_current_span("checkout") as span, transaction.atomic():
        order = Order.objects.create()
        job = tasks.send_invoice.enqueue(order.pk)
    ids = span.get_span_context()
    return JsonResponse(
        {
            "job": job.pk,
            "trace_id": trace.format_trace_id(ids.trace_id),
            "span_id": trace.format_span_id(ids.span_id),
        }
    )
