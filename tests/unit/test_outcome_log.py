"""The per-job log line: INFO while calm, DEBUG for successes under load, with summaries."""

from __future__ import annotations

import logging

import pytest

from django_dbqueue.worker.outcome_log import OutcomeLog
from tests.manual_clock import ManualClock


@pytest.fixture
def outcome_log(clock: ManualClock) -> OutcomeLog:
    return OutcomeLog(calm_rate=3, summary_every=10, clock=clock)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    found = [(record.levelno, record.getMessage()) for record in caplog.records]
    caplog.clear()
    return found


@pytest.fixture(autouse=True)
def _debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="django_dbqueue.worker.outcome_log")


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
    successes = [("job id=%s outcome=succeeded", (n,), True) for n in range(5)]
    outcome_log.write_all([*successes, ("job id=9 outcome=retried", (), False)])
    assert lines(caplog) == [
        *((logging.DEBUG, f"job id={n} outcome=succeeded") for n in range(5)),
        (logging.INFO, "job id=9 outcome=retried"),
    ]


def test_quieted_lines_cost_nothing_when_debug_is_off(
    outcome_log: OutcomeLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="django_dbqueue.worker.outcome_log")

    class Unprintable:
        def __str__(self) -> str:
            raise AssertionError("a quieted line was formatted")

    outcome_log.write_all([("job id=%s outcome=succeeded", (Unprintable(),), True)] * 5)
    outcome_log.write_all([("job id=9 outcome=retried", (), False)])
    assert lines(caplog) == [(logging.INFO, "job id=9 outcome=retried")]
