"""The outcome reporter: each written success logged and signalled, in order, off the completer."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from django_dbqueue import signals
from django_dbqueue.leases import Lease
from django_dbqueue.worker.reporter import Outcome, OutcomeReporter


def lease(job_id: int) -> Lease:
    return Lease(
        job_id, 1, "w1", "tests.jobs.tasks.noop", [], {}, 1, 5, timezone.now(), 30, "default"
    )


@pytest.fixture
def finished() -> Iterator[list[tuple[int, str]]]:
    received: list[tuple[int, str]] = []

    def receiver(sender: object, lease: Lease, outcome: str, **_: Any) -> None:
        received.append((lease.job_id, outcome))

    signals.job_finished.connect(receiver, dispatch_uid="test_reporter")
    yield received
    signals.job_finished.disconnect(dispatch_uid="test_reporter")


def test_outcomes_are_logged_and_signalled_in_order_then_it_stops(
    finished: list[tuple[int, str]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="django_dbqueue")
    wake_ups: list[None] = []
    reporter = OutcomeReporter(lambda: wake_ups.append(None))
    reporter.start()
    reporter.put([(lease(1), Outcome.SUCCEEDED, 0.01), (lease(2), Outcome.LEASE_LOST, 0.02)])
    reporter.put([(lease(3), Outcome.SUCCEEDED, 0.03)])
    reporter.close(timeout=10)

    assert not reporter.is_alive()
    assert finished == [(1, "succeeded"), (3, "succeeded")]  # a lost lease wrote nothing
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("job id=")]
    assert [line.split()[1] for line in lines] == ["id=1", "id=2", "id=3"]
    assert "outcome=lease_lost" in lines[1]
    assert len(wake_ups) == 2  # once a batch
    assert reporter.backlog == 0
