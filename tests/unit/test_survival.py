"""How a worker loop lives through failures: a connection closed for idling is no failure."""

from __future__ import annotations

import logging

import pytest
from django.db import utils as django_errors
from psycopg import errors as pg_errors

from django_dbqueue.worker import connections
from django_dbqueue.worker.connections import Survival


def idle_closed() -> Exception:
    driver = pg_errors.lookup("57P05")("terminating connection due to idle-session timeout")
    error = django_errors.OperationalError(*driver.args)
    error.__cause__ = driver
    return error


@pytest.fixture(autouse=True)
def first_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections, "_idle_closing_said", False)


def test_an_idle_closed_connection_is_retried_at_once_and_said_once_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "django_dbqueue")
    claim, renewal = Survival("claim"), Survival("lease renewal")

    assert claim.failed(idle_closed()) == 0.0
    claim.succeeded()
    assert claim.failed(idle_closed()) == 0.0
    assert renewal.failed(idle_closed()) == 0.0

    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == [logging.INFO, logging.DEBUG, logging.DEBUG]
    assert said[0][1].startswith("claim: the database closed an idle connection")
    assert claim.failures == renewal.failures == 0


def test_a_connection_closed_again_on_the_very_next_try_is_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "django_dbqueue")
    claim = Survival("claim")

    assert claim.failed(idle_closed()) == 0.0
    assert claim.failed(idle_closed()) > 0  # no busy loop against a server closing at once

    assert claim.failures == 1
    assert "claim failed (idle connection closed), retrying" in caplog.records[-1].getMessage()
    assert caplog.records[-1].levelno == logging.WARNING
