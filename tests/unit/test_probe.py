"""The wake-up probe's verdicts, and what the listener makes of a notification (no database)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from django_dbqueue.worker.listener import Listener
from django_dbqueue.worker.probe import PROBE_PREFIX, PROBE_WINDOW, Probe


@pytest.fixture
def probe(caplog: pytest.LogCaptureFixture) -> Probe:
    """A fresh probe, its verdicts captured from INFO up."""
    caplog.set_level(logging.INFO, "django_dbqueue.worker.probe")
    return Probe()


def listener(queues: list[str] | None) -> Listener:
    return Listener(queues, threading.Event(), threading.Event())


def sent(probe: Probe, seconds_ago: float) -> Probe:
    """``probe`` as if its NOTIFY went out ``seconds_ago``."""
    probe.sent_at = time.monotonic() - seconds_ago
    return probe


def verdicts(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (record.levelno, record.getMessage().split(":")[0])
        for record in caplog.records
        if record.name == "django_dbqueue.worker.probe"
    ]


def test_a_notification_naming_a_served_queue_wakes_the_claimer_and_others_do_not() -> None:
    mail = listener(["mail"])

    mail.heard("default")
    assert not mail.wake.is_set()
    mail.heard("mail")
    assert mail.wake.is_set()


@pytest.mark.parametrize("queues", [None, ["mail"]], ids=["every-queue", "one-queue"])
def test_probes_wake_no_claimer_neither_its_own_nor_another_workers(
    queues: list[str] | None,
) -> None:
    worker = listener(queues)
    sent(worker.probe, 0)

    worker.heard(f"{PROBE_PREFIX}0123456789abcdef")
    worker.heard(worker.probe.payload)

    assert not worker.wake.is_set()
    assert worker.probe.payload.startswith(PROBE_PREFIX)
    assert ":" in PROBE_PREFIX  # never a queue name, so no listener takes it for one


def test_its_own_probe_heard_is_said_once_at_info(
    probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(2):  # a second LISTEN (after a reconnect) probes again
        assert sent(probe, 0).hears(probe.payload)
        probe.check()

    assert verdicts(caplog) == [(logging.INFO, "wake-ups arrive")]


def test_an_unheard_probe_is_said_once_at_warning_after_its_window(
    probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    sent(probe, PROBE_WINDOW / 2).check()
    assert verdicts(caplog) == []
    for _ in range(2):
        sent(probe, PROBE_WINDOW).check()
        probe.check()

    assert verdicts(caplog) == [(logging.WARNING, "wake-ups do not arrive")]


def test_a_probe_heard_after_an_unheard_one_says_that_wake_ups_now_arrive(
    probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    sent(probe, PROBE_WINDOW).check()
    sent(probe, 0).hears(probe.payload)  # the next LISTEN, after a reconnect

    assert verdicts(caplog) == [
        (logging.WARNING, "wake-ups do not arrive"),
        (logging.INFO, "wake-ups arrive"),
    ]
