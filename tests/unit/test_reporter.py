"""The outcome reporter: each written success logged and signalled, in order, off the completer;
the per-job line at INFO while calm, DEBUG for successes under load, with summaries."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from django_dbqueue import signals
from django_dbqueue.leases import Lease
from django_dbqueue.worker.counters import WorkerCounters
from django_dbqueue.worker.live import LiveJobs
from django_dbqueue.worker.outcome import Outcome
from django_dbqueue.worker.reporter import Finished, Line, OutcomeLog, OutcomeReporter, report
from tests.manual_clock import ManualClock


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
    reporter = OutcomeReporter(WorkerCounters(), LiveJobs(), lambda: wake_ups.append(None))
    reporter.start()
    reporter.put(
        [Finished(lease(1), Outcome.SUCCEEDED, 0.01), Finished(lease(2), Outcome.LEASE_LOST, 0.02)]
    )
    reporter.put([Finished(lease(3), Outcome.SUCCEEDED, 0.03)])
    reporter.close(timeout=10)

    assert not reporter.is_alive()
    assert finished == [(1, "succeeded"), (3, "succeeded")]  # a lost lease wrote nothing
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("job id=")]
    assert [line.split()[1] for line in lines] == ["id=1", "id=2", "id=3"]
    assert "outcome=lease_lost" in lines[1]
    assert len(wake_ups) == 2  # once a batch
    assert reporter.backlog == 0


def test_a_failure_is_signalled_with_the_error_code_it_was_recorded_with() -> None:
    received: list[tuple[str, str]] = []

    def receiver(sender: object, outcome: str, error_code: str, **_: Any) -> None:
        received.append((outcome, error_code))

    signals.job_finished.connect(receiver, dispatch_uid="test_reporter_code")
    try:
        report(lease(4), Outcome.DEAD, "TASK_NOT_FOUND", 0.01)
        report(lease(5), Outcome.SUCCEEDED, "", 0.01)
    finally:
        signals.job_finished.disconnect(dispatch_uid="test_reporter_code")
    assert received == [("dead", "TASK_NOT_FOUND"), ("succeeded", "")]


def test_the_reporter_thread_logs_and_signals_each_outcome_with_its_own_code(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="django_dbqueue")
    received: list[tuple[int, str, str]] = []

    def receiver(sender: object, lease: Lease, outcome: str, error_code: str, **_: Any) -> None:
        received.append((lease.job_id, outcome, error_code))

    signals.job_finished.connect(receiver, dispatch_uid="test_reporter_thread_code")
    try:
        reporter = OutcomeReporter(WorkerCounters(), LiveJobs(), lambda: None)
        reporter.start()
        reporter.put(
            [
                Finished(lease(6), Outcome.SUCCEEDED, 0.01),
                Finished(lease(7), Outcome.DEAD, 0.01, "RESULT_NOT_SERIALIZABLE"),
            ]
        )
        reporter.close(timeout=10)
    finally:
        signals.job_finished.disconnect(dispatch_uid="test_reporter_thread_code")
    assert received == [(6, "succeeded", ""), (7, "dead", "RESULT_NOT_SERIALIZABLE")]
    dead_line = next(r for r in caplog.records if r.getMessage().startswith("job id=7 "))
    assert "outcome=dead code=RESULT_NOT_SERIALIZABLE" in dead_line.getMessage()


@pytest.fixture
def outcome_log(clock: ManualClock) -> OutcomeLog:
    return OutcomeLog(calm_rate=3, summary_every=10, clock=clock)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    found = [(record.levelno, record.getMessage()) for record in caplog.records]
    caplog.clear()
    return found


@pytest.fixture(autouse=True)
def _debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="django_dbqueue.worker.reporter")


def test_successes_log_at_info_while_few_come_each_second(
    outcome_log: OutcomeLog, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    for second in range(3):
        clock.now = 1000 + second
        for n in range(3):
            outcome_log.write("job id=%s outcome=succeeded", n, quiet=True)
    assert {level for level, _ in lines(caplog)} == {logging.INFO}


def test_successes_go_to_debug_once_over_the_rate_and_info_gets_a_summary(
    outcome_log: OutcomeLog, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(5):
        outcome_log.write("job id=%s outcome=succeeded", n, quiet=True)
    assert [level for level, _ in lines(caplog)] == [logging.INFO] * 3 + [logging.DEBUG] * 2

    for second in range(1, 10):  # busy every second: even the first lines of each go to DEBUG
        clock.now = 1000 + second
        for n in range(5):
            outcome_log.write("job id=%s outcome=succeeded", n, quiet=True)
    assert {level for level, _ in lines(caplog)} == {logging.DEBUG}

    clock.now = 1010  # ten seconds after the first quiet line: a summary of all 48
    outcome_log.write("job id=9 outcome=succeeded", quiet=True)
    assert lines(caplog) == [
        (logging.INFO, "48 job successes logged at DEBUG since the last summary (over 3 a second)"),
        (logging.DEBUG, "job id=9 outcome=succeeded"),
    ]


def test_a_calm_second_brings_info_back_with_the_rest_summarised(
    outcome_log: OutcomeLog, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(5):
        outcome_log.write("job id=%s outcome=succeeded", n, quiet=True)
    caplog.clear()
    clock.now += 2  # a whole second below the rate has passed
    outcome_log.write("job id=7 outcome=succeeded", quiet=True)
    assert lines(caplog) == [
        (logging.INFO, "2 job successes logged at DEBUG since the last summary (over 3 a second)"),
        (logging.INFO, "job id=7 outcome=succeeded"),
    ]


def test_failures_always_log_at_info(
    outcome_log: OutcomeLog, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(10):
        outcome_log.write("job id=%s outcome=succeeded", n, quiet=True)
    caplog.clear()
    outcome_log.write("job id=11 outcome=retried code=ValueError", quiet=False)
    assert lines(caplog) == [(logging.INFO, "job id=11 outcome=retried code=ValueError")]


def test_a_batch_of_successes_gets_one_level_from_the_rate_they_make_together(
    outcome_log: OutcomeLog, caplog: pytest.LogCaptureFixture
) -> None:
    successes = [Line("job id=%s outcome=succeeded", (n,), True) for n in range(5)]
    outcome_log.write_all([*successes, Line("job id=9 outcome=retried", (), False)])
    assert lines(caplog) == [
        *((logging.DEBUG, f"job id={n} outcome=succeeded") for n in range(5)),
        (logging.INFO, "job id=9 outcome=retried"),
    ]


def test_quieted_lines_cost_nothing_when_debug_is_off(
    outcome_log: OutcomeLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="django_dbqueue.worker.reporter")

    class Unprintable:
        def __str__(self) -> str:
            raise AssertionError("a quieted line was formatted")

    outcome_log.write_all([Line("job id=%s outcome=succeeded", (Unprintable(),), True)] * 5)
    outcome_log.write_all([Line("job id=9 outcome=retried", (), False)])
    assert lines(caplog) == [(logging.INFO, "job id=9 outcome=retried")]
