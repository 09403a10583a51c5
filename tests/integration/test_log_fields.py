"""Structured logs (``logfields``): every line about a job carries its fields as ``extra``.

The per-attempt outcome line carries all of ``logfields.FIELDS``; a failed attempt's line
carries its traceback, and no other line logs it again.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pytest_django import Settings

from django_dbqueue import PermanentError, leases, reaper
from django_dbqueue.errors import LEASE_EXPIRED, MIDDLEWARE_FAILED
from django_dbqueue.logfields import FIELDS
from django_dbqueue.worker.execute import execute
from tests.integration.test_execute import claim, expire, steal
from tests.integration.test_middleware import configure
from tests.jobs import tasks


def outcome_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if hasattr(record, "outcome")]


def fields(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in FIELDS}


@pytest.fixture(autouse=True)
def _info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="django_dbqueue")


@pytest.mark.django_db
class TestOutcomeLine:
    @pytest.mark.parametrize(
        ("task", "args", "outcome", "code"),
        [
            (tasks.send_invoice, (4,), "succeeded", None),
            (tasks.flaky, ("down",), "retried", "ConnectionError"),
            (tasks.permanent, (), "dead", "PERMANENT_ERROR"),
        ],
        ids=["succeeded", "retried", "dead"],
    )
    def test_carries_every_field(
        self,
        caplog: pytest.LogCaptureFixture,
        task: Any,
        args: tuple[Any, ...],
        outcome: str,
        code: str | None,
    ) -> None:
        job = task.enqueue(*args)
        execute(claim(job, "worker-a"))
        (record,) = outcome_records(caplog)
        logged = fields(record)
        assert logged["duration_ms"] >= 0
        assert logged == {
            "job_id": job.pk,
            "task": task.name,
            "queue": job.queue,
            "attempt": 1,
            "outcome": outcome,
            "duration_ms": logged["duration_ms"],
            "error_code": code,
            "worker_id": "worker-a",
        }

    def test_a_success_carries_no_traceback(self, caplog: pytest.LogCaptureFixture) -> None:
        execute(claim(tasks.noop.enqueue()))
        (record,) = outcome_records(caplog)
        assert record.exc_info is None

    @pytest.mark.parametrize(
        ("task", "args", "error"),
        [(tasks.flaky, ("down",), ConnectionError), (tasks.permanent, (), PermanentError)],
        ids=["retried", "dead"],
    )
    def test_a_failed_attempt_logs_its_traceback_once(
        self, caplog: pytest.LogCaptureFixture, task: Any, args: tuple[Any, ...], error: type
    ) -> None:
        execute(claim(task.enqueue(*args)))
        (record,) = outcome_records(caplog)
        assert record.exc_info is not None
        assert isinstance(record.exc_info[1], error)
        with_traceback = [r for r in caplog.records if r.exc_info is not None]
        assert with_traceback == [record]
        assert caplog.text.count("Traceback (most recent call last)") == 1

    def test_a_middleware_failure_logs_its_traceback_once(
        self, caplog: pytest.LogCaptureFixture, settings: Settings
    ) -> None:
        configure(settings, "raises")
        execute(claim(tasks.noop.enqueue()))
        (record,) = outcome_records(caplog)
        assert (record.outcome, record.error_code) == ("retried", MIDDLEWARE_FAILED)
        assert "ValueError: the tracer is misconfigured" in caplog.text
        assert caplog.text.count("Traceback (most recent call last)") == 2  # the chain: cause first
        assert [r for r in caplog.records if r.exc_info is not None] == [record]

    def test_a_retry_asked_for_is_no_error_to_trace(self, caplog: pytest.LogCaptureFixture) -> None:
        execute(claim(tasks.asks_retry.enqueue(5)))
        (record,) = outcome_records(caplog)
        assert (record.outcome, record.error_code, record.exc_info) == ("retried", "RETRY", None)

    def test_a_lost_lease_is_the_outcome_and_the_refused_write_carries_the_job(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        job = tasks.noop.enqueue()
        lease_a = claim(job, "worker-a")
        steal(job.pk, "worker-b")
        caplog.clear()
        execute(lease_a)
        (record,) = outcome_records(caplog)
        assert fields(record) | {"duration_ms": 0} == {
            "job_id": job.pk,
            "task": tasks.noop.name,
            "queue": "default",
            "attempt": 1,
            "outcome": "lease_lost",
            "duration_ms": 0,
            "error_code": None,
            "worker_id": "worker-a",
        }
        (refused,) = [r for r in caplog.records if r.getMessage().startswith("lease lost")]
        assert (refused.job_id, refused.worker_id, refused.lease_token) == (
            job.pk,
            "worker-a",
            lease_a.lease_token,
        )
        assert (refused.task, refused.queue, refused.attempt) == (tasks.noop.name, "default", 1)


@pytest.mark.django_db
class TestLinesAboutSeveralJobs:
    def test_the_reaper_line_carries_the_ids_it_reaped(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        jobs = [tasks.noop.enqueue() for _ in range(2)]
        assert len(leases.claim(None, "worker-a", 2)) == 2
        for job in jobs:
            expire(job.pk)
        reaper.reap()
        (record,) = [r for r in caplog.records if r.getMessage().startswith("reaped")]
        assert record.job_ids == sorted(job.pk for job in jobs)
        assert record.error_code == LEASE_EXPIRED

    def test_a_cancel_request_line_carries_the_ids_it_marked(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        job = tasks.noop.enqueue()
        claim(job)
        leases.request_cancel([job.pk], "ops")
        (record,) = [r for r in caplog.records if r.getMessage().startswith("cancel requested")]
        assert record.job_ids == [job.pk]
