"""What OpenTelemetry tracing costs (``--tracing``): the drain and the enqueue, with and without
``TracingMiddleware``, in the same run.

Each of ``sizes.rounds`` rounds drains ``sizes.compare_jobs`` freshly seeded
no-op jobs twice, 1 process x 32 threads (``PLAIN``): without middleware, then with the
tracing middleware and OpenTelemetry's SDK making every span and dropping it
(``benchmarks.otel``), so other work on the machine weighs on both alike.
Both drain the same jobs: copies of one enqueued through the middleware
inside a span, so each carries the trace context a traced project's job
would, and each attempt's span has a parent to extract. The figures
are the medians of the rounds; the worker CPU per job (start-up included, the
same for both) is in the details. A drain past ``sizes.long_drain_deadline`` is
stopped and measured over the jobs it ran (``drain.measure``).

The enqueue side runs here: ``sizes.enqueue_one`` enqueues, one transaction
each, inside an active span, with and without the middleware (medians of the
rounds), and the CPU time of the enqueue hook alone (``TracingMiddleware.enqueued``)
per call: on a busy machine the enqueue's rate moves by more than the hook costs.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.test import override_settings
from opentelemetry import trace

from benchmarks import compare, drain, enqueue
from benchmarks.otel import TRACING, install_sdk
from benchmarks.results import Result
from benchmarks.session import Session
from benchmarks.timing import rate
from django_dbqueue.contrib.opentelemetry import TracingMiddleware
from django_dbqueue.middleware import Enqueueing

#: One process, its transitions committed asynchronously: the drain is then bound by the
#: worker's CPU (one core, under the GIL), where a span's cost shows whole, not by the
#: server's commit flushes, which would hide it.
PLAIN = drain.Drain("tracing_drain_plain", 1, 32, synchronous_commit=False)
TRACED = dataclasses.replace(PLAIN, key="tracing_drain_traced", middleware=(TRACING,))
#: Calls of the enqueue hook alone, timed together.
HOOK_CALLS = 20_000


def run(session: Session) -> None:
    """The drain rounds, then the enqueue side; adds rates, the ratio and the per-call costs."""
    install_sdk()
    drained: dict[drain.Drain, list[tuple[float, float]]] = {PLAIN: [], TRACED: []}
    for _ in range(session.sizes.rounds):
        for how in drained:
            drained[how].append(traced_drain(session, how))
    medians = {how: statistics.median(r for r, _ in rounds) for how, rounds in drained.items()}
    for how, rounds in drained.items():
        label = f"tracing: {how.label.removeprefix('drain: ')}" + (
            ", TracingMiddleware, spans made and dropped" if how.middleware else ", no middleware"
        )
        details = {
            "rounds": [r for r, _ in rounds],
            "worker_cpu_us_per_job": statistics.median(c for _, c in rounds),
        }
        result = Result(how.key, label, medians[how], "jobs/s", n=n(session), details=details)
        session.results.add(result)
    ratio = medians[TRACED] / medians[PLAIN]
    session.results.add(
        Result("tracing_drain_ratio", "tracing: traced / plain drain rate", ratio, "x")
    )
    enqueue_side(session)


def n(session: Session) -> int:
    return session.sizes.compare_jobs


def traced_drain(session: Session, how: drain.Drain) -> tuple[float, float]:
    """One drain by ``how`` of jobs that carry a trace context: its rate, worker CPU per job."""
    with traced_enqueues():
        ids = drain.seeded(session, n(session))
    deadline = session.sizes.long_drain_deadline
    result, split = compare.measured(
        session, functools.partial(drain.measure, session, how, ids, deadline)
    )
    succeeded = int(result.details["succeeded"])  # type: ignore[call-overload]  # an int
    return result.value, split.per_job_us(succeeded).worker


@contextmanager
def traced_enqueues() -> Iterator[None]:
    """Enqueues in here are traced: inside a span, through the tracing middleware."""
    with (
        trace.get_tracer(__name__).start_as_current_span("benchmark request"),
        override_settings(DBQUEUE={"MIDDLEWARE": [TRACING]}),
    ):
        yield


def enqueue_side(session: Session) -> None:
    """Enqueue rates with and without the hook (inside a span), and the hook alone per call."""
    count = session.sizes.enqueue_one
    one = functools.partial(enqueue.one_per_transaction, count)
    rates: dict[str, list[float]] = {"plain": [], "traced": []}
    for _ in range(session.sizes.rounds):
        with trace.get_tracer(__name__).start_as_current_span("benchmark request"):
            rates["plain"].append(rate(count, one))
        with traced_enqueues():
            rates["traced"].append(rate(count, one))
    with traced_enqueues():
        started = time.process_time()
        call_hook(HOOK_CALLS)
        cpu_seconds = time.process_time() - started
    medians = {key: statistics.median(values) for key, values in rates.items()}
    for key, value in medians.items():
        how = "TracingMiddleware (a send span)" if key == "traced" else "no middleware"
        session.results.add(
            Result(
                f"tracing_enqueue_{key}",
                f"tracing: enqueue, one per transaction, in a span, {how}",
                value,
                "jobs/s",
                n=count,
                details={"rounds": rates[key]},
            )
        )
    per_enqueue = (1 / medians["traced"] - 1 / medians["plain"]) * 1e6
    session.results.add(
        Result("tracing_enqueue_cost", "tracing: enqueue cost of the hook", per_enqueue, "us/job")
    )
    session.results.add(
        Result(
            "tracing_hook_call",
            "tracing: TracingMiddleware.enqueued alone, CPU (its span processor's thread too)",
            cpu_seconds / HOOK_CALLS * 1e6,
            "us/call",
            n=HOOK_CALLS,
        )
    )


def call_hook(count: int) -> None:
    """The enqueue hook, ``count`` times: a send span made, ended and dropped, its context
    injected."""
    enqueueing = Enqueueing(task="benchmarks.tasks.noop", queue="default", count=1)
    for _ in range(count):
        TracingMiddleware.enqueued(enqueueing)
