"""OpenTelemetry's SDK as the tracing benchmark runs it: every span made, then dropped.

A project exports its spans; what the middleware itself costs is making them,
so the spans go through the SDK's ``BatchSpanProcessor`` (what a project
configures) to an exporter that drops them. No Django import here: the
benchmark settings call ``install_sdk`` while they load.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

#: The one middleware line that turns tracing on.
TRACING = "django_dbqueue.contrib.opentelemetry.TracingMiddleware"


class DroppingExporter(SpanExporter):
    """Exports nothing: every batch of spans is dropped as exported."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def install_sdk() -> None:
    """Make a tracer provider whose spans are batched, then dropped, this process's."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DroppingExporter()))
    trace.set_tracer_provider(provider)
