"""An app the e2e settings install when ``DBQUEUE_SPANS_FILE`` is set: the worker process's
OpenTelemetry SDK, writing every span it ends to that file as a JSON line."""

from __future__ import annotations

import os
from pathlib import Path

from django.apps import AppConfig

from tests.tracing import JsonLinesExporter, install


class SpansToFile(AppConfig):
    name = "tests.e2e"
    label = "e2e_tracing"

    def ready(self) -> None:
        install(JsonLinesExporter(Path(os.environ["DBQUEUE_SPANS_FILE"])))
