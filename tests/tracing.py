"""OpenTelemetry for the tracing tests: the SDK, configured once per process, and its spans.

The API takes one global tracer provider per process (a second is refused), so
the test process installs one with the in-memory exporter the first time a test
asks (``in_memory``), and a worker subprocess one that writes each span as a
JSON line (``JsonLinesExporter``, installed by ``tests.e2e.tracing``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@functools.cache
def in_memory() -> InMemorySpanExporter:
    """The exporter every span of this process ends in, installed the first time."""
    exporter = InMemorySpanExporter()
    install(exporter)
    return exporter


def install(exporter: SpanExporter) -> None:
    """Make a tracer provider exporting each span to ``exporter`` as it ends the global one."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


class JsonLinesExporter(SpanExporter):
    """Appends each span to a file, one ``ReadableSpan.to_json()`` object a line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as out:
            out.writelines(span.to_json(indent=None) + "\n" for span in spans)
        return SpanExportResult.SUCCESS


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The spans a ``JsonLinesExporter`` wrote to ``path`` (none if it wrote nothing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
