"""The announcer: each written success logged and signalled, in order, off the completer."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from django_dbqueue import signals
from django_dbqueue.leases import Lease
from django_dbqueue.worker.announcer import Announcer
from django_dbqueue.worker.execute import Outcome


def lease(job_id: int) -> Lease:
    return Lease(job_id, 1, "w1", "tests.tasks.noop", [], {}, 1, 5, timezone.now(), 30, "default")


@pytest.fixture
def finished() -> Iterator[list[tuple[int, str]]]:
    received: list[tuple[int, str]] = []

    def receiver(sender: object, lease: Lease, outcome: str, **_: Any) -> None:
        received.append((lease.job_id, outcome))

    signals.job_finished.connect(receiver, dispatch_uid="test_announcer")
    yield received
    signals.job_finished.disconnect(dispatch_uid="test_announcer")


def test_outcomes_are_logged_and_signalled_in_order_then_it_stops(
    finished: list[tuple[int, str]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="django_dbqueue")
    wake_ups: list[None] = []
    announcer = Announcer(lambda: wake_ups.append(None))
    announcer.start()
    announcer.put(lease(1), Outcome.SUCCEEDED, 0.01)
    announcer.put(lease(2), Outcome.LEASE_LOST, 0.02)
    announcer.put(lease(3), Outcome.SUCCEEDED, 0.03)
    announcer.close(timeout=10)

    assert not announcer.is_alive()
    assert finished == [(1, "succeeded"), (3, "succeeded")]  # a lost lease wrote nothing
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("job id=")]
    assert [line.split()[1] for line in lines] == ["id=1", "id=2", "id=3"]
    assert "outcome=lease_lost" in lines[1]
    assert len(wake_ups) == 3
    assert announcer.backlog == 0
