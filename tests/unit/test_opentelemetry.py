"""``django_dbqueue.contrib.opentelemetry`` with the API alone: no SDK, no tracer provider.

Each case runs in a fresh interpreter: the API takes one tracer provider per
process, and the test process installs the SDK's (``tests.tracing``).
"""

from __future__ import annotations

import json
from typing import Any

from tests.fresh_python import ROOT, run_python

SET_UP = """\
import json, sys

import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django_dbqueue"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()
"""

WITHOUT_SDK = (
    SET_UP
    + """\
from django.utils import timezone
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from django_dbqueue.context import JobContext
from django_dbqueue.contrib.opentelemetry import TracingMiddleware
from django_dbqueue.leases import Lease
from django_dbqueue.middleware import Enqueueing

enqueueing = Enqueueing(task="shop.tasks.invoice", queue="mail", count=1)
found = {"no span": TracingMiddleware.enqueued(enqueueing)}
remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
with trace.use_span(NonRecordingSpan(remote)):
    found["a span"] = TracingMiddleware.enqueued(enqueueing)
lease = Lease(7, 1, "w1", "shop.tasks.invoice", [], {}, 1, 5, timezone.now(), 30, "mail",
              meta=found["a span"])
seen = []
attempt = TracingMiddleware(lambda context: seen.append(trace.get_current_span()) or "done")
found["result"] = attempt(JobContext(lease))
found["span in the attempt"] = seen[0].get_span_context().span_id
found["provider"] = type(trace.get_tracer_provider()).__name__
print(json.dumps(found))
"""
)

WITHOUT_EXTRA = (
    SET_UP
    + """\
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from django.core.exceptions import ImproperlyConfigured
try:
    import django_dbqueue.contrib.opentelemetry
except ImproperlyConfigured as exc:
    print(exc)
"""
)


def probe(script: str) -> str:
    result = run_python("-c", script, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_without_an_sdk_the_enqueue_keeps_only_a_context_some_other_tool_made_current() -> None:
    found: dict[str, Any] = json.loads(probe(WITHOUT_SDK))
    assert found["provider"] == "ProxyTracerProvider"
    assert found["no span"] is None
    assert found["a span"] == {
        "otel": {"traceparent": f"00-{0xABC:032x}-{0xDEF:016x}-01"},
    }
    # The attempt runs, in the API's non-recording span: it carries the enqueue's context.
    assert found["result"] == "done"
    assert found["span in the attempt"] == 0xDEF


def test_without_the_extra_the_import_says_what_to_install() -> None:
    assert 'pip install "django-dbqueue[otel]"' in probe(WITHOUT_EXTRA)
