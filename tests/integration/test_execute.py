"""``worker.execute``: one claimed job run end to end, its outcome read back from the row."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError
from django.utils import timezone

from django_dbqueue import JobContext, leases, reaper, signals
from django_dbqueue.durations import MAX_DELAY
from django_dbqueue.errors import (
    BAD_ARGUMENTS,
    CANCELLED,
    HISTORY_LIMIT,
    LAST_ERROR_LIMIT,
    LEASE_EXPIRED,
    MESSAGE_LIMIT,
    RESULT_NOT_SERIALIZABLE,
    RESULT_TOO_LARGE,
    RETRY,
    TASK_ABORTED,
    TASK_NOT_FOUND,
    UNPRINTABLE,
)
from django_dbqueue.models import Job, JobState
from django_dbqueue.worker.execute import execute
from django_dbqueue.worker.outcome import Outcome
from tests.factories import JobFactory
from tests.jobs import execute_tasks, tasks, unstorable_tasks
from tests.refusals import refusing

HISTORY_KEYS = {"attempt", "worker", "at", "code", "message", "traceback", "exception"}
OUTCOME_LINE = "job id="


@pytest.fixture(autouse=True)
def _clear_execute_tasks() -> Iterator[None]:
    execute_tasks.HOOKS.clear()
    execute_tasks.SEEN.clear()
    yield
    execute_tasks.HOOKS.clear()
    execute_tasks.SEEN.clear()


def claim(job: Job | int, worker_id: str = "worker-a") -> leases.Lease:
    """Claim exactly this job (it must be due) for ``worker_id``."""
    job_id = job if isinstance(job, int) else job.pk
    queue = Job.objects.values_list("queue", flat=True).get(pk=job_id)
    claimed = leases.claim([queue], worker_id, 10)
    assert [lease.job_id for lease in claimed] == [job_id]
    return claimed[0]


def make_due(job_id: int) -> None:
    """Skip the backoff wait: the job is due now."""
    Job.objects.filter(pk=job_id).update(run_at=timezone.now() - timedelta(seconds=1))


def expire(job_id: int) -> None:
    """Move the lease into the past, as if its worker had stalled."""
    Job.objects.filter(pk=job_id).update(lease_until=timezone.now() - timedelta(seconds=1))


def steal(job_id: int, worker_id: str = "worker-b") -> leases.Lease:
    """Let the lease expire, reap it, and claim the job again as another worker."""
    expire(job_id)
    assert job_id in reaper.reap().retried
    make_due(job_id)
    return claim(job_id, worker_id)


def run_again(job_id: int, worker_id: str = "worker-a") -> Outcome:
    """Make a retried job due, claim it and execute it."""
    make_due(job_id)
    return execute(claim(job_id, worker_id))


def row(job_id: int) -> dict[str, Any]:
    """Every column of the job as stored."""
    return Job.objects.filter(pk=job_id).values().get()


def parse_at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["at"])


def outcome_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, str]]:
    """The key=value fields of every per-job outcome line logged."""
    return [
        dict(part.split("=", 1) for part in record.getMessage().split()[1:])
        for record in caplog.records
        if record.name.startswith("django_dbqueue") and record.getMessage().startswith(OUTCOME_LINE)
    ]


@pytest.mark.django_db
class TestSuccess:
    def test_success_stores_json_result_and_clears_the_lease(self) -> None:
        job = tasks.send_invoice.enqueue(7, copy=True)
        started = timezone.now()
        outcome = execute(claim(job))
        finished = timezone.now()
        job.refresh_from_db()
        assert outcome is Outcome.SUCCEEDED
        assert job.state == JobState.SUCCEEDED
        assert job.result == {"order": 7, "copy": True}
        assert job.finished_at is not None
        assert started - timedelta(seconds=1) <= job.finished_at <= finished + timedelta(seconds=1)
        assert (job.worker_id, job.lease_until) == (None, None)
        assert (job.attempts, job.lease_token) == (1, 1)
        assert (job.last_error_code, job.last_error, job.errors) == ("", "", [])
        assert tasks.CALLS == [("send_invoice", 7)]

    def test_task_returning_none_stores_null_result(self) -> None:
        job = tasks.noop.enqueue()
        assert execute(claim(job)) is Outcome.SUCCEEDED
        job.refresh_from_db()
        assert job.state == JobState.SUCCEEDED
        assert job.result is None
        assert tasks.CALLS == [("noop", None)]

    @pytest.mark.django_db(transaction=True)
    def test_success_and_retry_are_committed_outside_any_atomic_block(self) -> None:
        done = tasks.send_invoice.enqueue(1)
        failing = tasks.flaky.enqueue("down")
        assert execute(claim(done)) is Outcome.SUCCEEDED
        assert execute(claim(failing)) is Outcome.RETRIED
        assert Job.objects.get(pk=done.pk).state == JobState.SUCCEEDED
        assert Job.objects.get(pk=failing.pk).state == JobState.READY


@pytest.mark.django_db
class TestContext:
    def test_context_task_receives_its_job_identity(self) -> None:
        job = tasks.with_context.enqueue("hello")
        assert execute(claim(job, "worker-ctx")) is Outcome.SUCCEEDED
        job.refresh_from_db()
        assert job.state == JobState.SUCCEEDED
        assert job.result == {
            "label": "hello",
            "job_id": job.pk,
            "attempt": 1,
            "max_attempts": job.max_attempts,
            "worker_id": "worker-ctx",
            "idempotency_key": f"dbqueue-job-{job.pk}",
        }

    def test_idempotency_key_is_the_same_on_a_later_attempt_by_another_worker(self) -> None:
        job = execute_tasks.whoami.enqueue()
        claim(job, "worker-a")
        lease_b = steal(job.pk, "worker-b")
        assert execute(lease_b) is Outcome.SUCCEEDED
        job.refresh_from_db()
        assert job.result == {
            "worker_id": "worker-b",
            "attempt": 2,
            "idempotency_key": f"dbqueue-job-{job.pk}",
        }

    def test_heartbeat_renews_a_live_lease(self) -> None:
        job = execute_tasks.heartbeat_after_hooks.enqueue()

        def shorten_lease(context: JobContext) -> None:
            Job.objects.filter(pk=context.job_id).update(
                lease_until=timezone.now() + timedelta(seconds=2)
            )

        execute_tasks.HOOKS.append(shorten_lease)
        lease = claim(job)
        context = JobContext(lease)
        started = timezone.now()
        assert execute(lease, context) is Outcome.SUCCEEDED
        (seen,) = execute_tasks.SEEN
        assert seen["lease_until"] >= started + timedelta(seconds=29)
        assert seen["lease_lost"] is False
        assert not context.lease_lost.is_set()
        job.refresh_from_db()
        assert (job.state, job.result) == (JobState.SUCCEEDED, "renewed")

    def test_heartbeat_after_the_lease_was_reclaimed_raises_lease_lost_and_writes_nothing(
        self,
    ) -> None:
        job = execute_tasks.heartbeat_after_hooks.enqueue()
        new_owner: list[dict[str, Any]] = []

        def reclaim_by_another_worker(context: JobContext) -> None:
            steal(context.job_id, "worker-b")
            new_owner.append(row(context.job_id))

        execute_tasks.HOOKS.append(reclaim_by_another_worker)
        lease = claim(job, "worker-a")
        context = JobContext(lease)
        assert execute(lease, context) is Outcome.LEASE_LOST
        assert execute_tasks.SEEN == [{"raised": "LeaseLost", "lease_lost": True}]
        assert context.lease_lost.is_set()
        (snapshot,) = new_owner
        assert row(job.pk) == snapshot
        assert (snapshot["state"], snapshot["worker_id"]) == (JobState.RUNNING, "worker-b")
        assert (snapshot["lease_token"], snapshot["attempts"]) == (2, 2)
        assert [entry["code"] for entry in snapshot["errors"]] == [LEASE_EXPIRED]


@pytest.mark.django_db
class TestRetryOnException:
    def test_exception_schedules_a_retry_within_the_backoff_bounds(self) -> None:
        job = tasks.flaky.enqueue("smtp down")
        t0 = timezone.now()
        outcome = execute(claim(job, "worker-a"))
        t1 = timezone.now()
        job.refresh_from_db()
        assert outcome is Outcome.RETRIED
        assert job.state == JobState.READY
        assert (job.attempts, job.max_attempts) == (1, 3)
        assert t0 + timedelta(seconds=5) <= job.run_at <= t1 + timedelta(seconds=10)
        assert (job.worker_id, job.lease_until, job.finished_at) == (None, None, None)
        assert job.last_error_code == "ConnectionError"
        assert job.last_error.startswith("Traceback (most recent call last):")
        assert job.last_error.rstrip().endswith("ConnectionError: smtp down")
        (entry,) = job.errors
        assert set(entry) == HISTORY_KEYS
        assert (entry["attempt"], entry["worker"], entry["code"]) == (
            1,
            "worker-a",
            "ConnectionError",
        )
        assert entry["message"] == "ConnectionError: smtp down"
        assert "raise ConnectionError(message)" in entry["traceback"]
        assert t0 <= parse_at(entry) <= t1

    def test_exception_is_retried_until_the_budget_is_spent_then_dead(self) -> None:
        job = tasks.flaky.enqueue("still down")
        delays = []
        for attempt in (1, 2):
            t0 = timezone.now()
            assert (execute(claim(job, f"worker-{attempt}"))) is Outcome.RETRIED
            t1 = timezone.now()
            job.refresh_from_db()
            assert (job.state, job.attempts) == (JobState.READY, attempt)
            delays.append((job.run_at - t1, job.run_at - t0))
            make_due(job.pk)
        # Backoff(base=10, factor=2, cap=60): attempt 1 waits 5-10 s, attempt 2 waits 10-20 s.
        assert timedelta(seconds=5) <= delays[0][1]
        assert delays[0][0] <= timedelta(seconds=10)
        assert timedelta(seconds=10) <= delays[1][1]
        assert delays[1][0] <= timedelta(seconds=20)

        assert execute(claim(job, "worker-3")) is Outcome.DEAD
        job.refresh_from_db()
        assert job.state == JobState.DEAD
        assert job.finished_at is not None
        assert job.attempts == job.max_attempts == 3
        assert (job.worker_id, job.lease_until) == (None, None)
        assert job.last_error_code == "ConnectionError"
        assert [(e["attempt"], e["worker"], e["code"]) for e in job.errors] == [
            (1, "worker-1", "ConnectionError"),
            (2, "worker-2", "ConnectionError"),
            (3, "worker-3", "ConnectionError"),
        ]
        assert all(set(entry) == HISTORY_KEYS for entry in job.errors)

    def test_type_error_inside_the_task_body_is_retried_not_bad_arguments(self) -> None:
        job = execute_tasks.raises_type_error.enqueue()
        assert execute(claim(job)) is Outcome.RETRIED
        job.refresh_from_db()
        assert (job.state, job.last_error_code) == (JobState.READY, "TypeError")


@pytest.mark.django_db
class TestRetryRequested:
    def test_retry_with_delay_schedules_the_job_that_far_ahead(self) -> None:
        job = tasks.asks_retry.enqueue(30)
        t0 = timezone.now()
        assert execute(claim(job)) is Outcome.RETRIED
        t1 = timezone.now()
        job.refresh_from_db()
        assert job.state == JobState.READY
        assert job.attempts == 1
        assert t0 + timedelta(seconds=30) <= job.run_at <= t1 + timedelta(seconds=30)
        assert job.last_error_code == RETRY
        (entry,) = job.errors
        assert (entry["attempt"], entry["code"]) == (1, RETRY)

    def test_retry_without_delay_uses_the_task_backoff(self) -> None:
        job = tasks.asks_retry.enqueue(None)
        t0 = timezone.now()
        assert execute(claim(job)) is Outcome.RETRIED
        t1 = timezone.now()
        job.refresh_from_db()
        # The settings' policy (base 2): attempt 1 waits 1-2 s.
        assert t0 + timedelta(seconds=1) <= job.run_at <= t1 + timedelta(seconds=2)
        assert job.last_error_code == RETRY

    def test_retry_consumes_attempts_and_dies_with_code_retry_at_budget_end(self) -> None:
        job = tasks.asks_retry.enqueue(5)
        assert execute(claim(job)) is Outcome.RETRIED
        assert run_again(job.pk) is Outcome.RETRIED
        job.refresh_from_db()
        assert (job.state, job.attempts) == (JobState.READY, 2)
        assert run_again(job.pk) is Outcome.DEAD
        job.refresh_from_db()
        assert job.state == JobState.DEAD
        assert job.attempts == job.max_attempts == 3
        assert job.finished_at is not None
        assert job.last_error_code == RETRY
        assert [(e["attempt"], e["code"]) for e in job.errors] == [
            (1, RETRY),
            (2, RETRY),
            (3, RETRY),
        ]


@pytest.mark.django_db
class TestBaseExceptionFromTaskCode:
    """``SystemExit``, ``CancelledError`` and the like end an attempt, never the slot."""

    @pytest.mark.parametrize(
        ("task", "args", "exception", "message"),
        [
            (execute_tasks.exits, (3,), "builtins.SystemExit", "SystemExit: 3"),
            (
                execute_tasks.cancelled,
                (),
                "asyncio.exceptions.CancelledError",
                "CancelledError: cancelled from inside the task",
            ),
            (
                execute_tasks.cancelled_async,
                (),
                "asyncio.exceptions.CancelledError",
                "CancelledError: cancelled from inside the coroutine",
            ),
            (execute_tasks.interrupted, (), "builtins.KeyboardInterrupt", "KeyboardInterrupt: "),
        ],
        ids=["sys-exit", "cancelled", "cancelled-async", "keyboard-interrupt"],
    )
    def test_is_a_failed_attempt_retried_then_dead(
        self, task: Any, args: tuple[Any, ...], exception: str, message: str
    ) -> None:
        job = task.enqueue(*args)
        assert execute(claim(job)) is Outcome.RETRIED
        job.refresh_from_db()
        assert (job.state, job.attempts, job.last_error_code) == (
            JobState.READY,
            1,
            TASK_ABORTED,
        )
        (entry,) = job.errors
        assert (entry["code"], entry["exception"], entry["message"]) == (
            TASK_ABORTED,
            exception,
            message,
        )
        assert run_again(job.pk) is Outcome.DEAD
        job.refresh_from_db()
        assert (job.state, job.attempts, job.last_error_code) == (JobState.DEAD, 2, TASK_ABORTED)


@pytest.mark.django_db
class TestRetryDelayBounds:
    def test_a_delay_past_the_cap_waits_the_cap_and_says_so(self) -> None:
        job = execute_tasks.retry_after.enqueue("1e12")
        t0 = timezone.now()
        assert execute(claim(job)) is Outcome.RETRIED
        job.refresh_from_db()
        assert job.state == JobState.READY
        assert t0 + MAX_DELAY <= job.run_at <= timezone.now() + MAX_DELAY
        (entry,) = job.errors
        assert entry["code"] == RETRY
        assert f"delay 1e+12s capped at {MAX_DELAY.total_seconds():g}s" in entry["message"]

    @pytest.mark.parametrize("delay", ["nan", "inf", "-1"])
    def test_a_delay_that_is_no_duration_fails_the_attempt_saying_why(self, delay: str) -> None:
        job = execute_tasks.retry_after.enqueue(delay)
        assert execute(claim(job)) is Outcome.RETRIED
        job.refresh_from_db()
        assert (job.state, job.last_error_code) == (JobState.READY, "ValueError")
        (entry,) = job.errors
        assert "the delay must be a finite number of seconds" in entry["message"]


@pytest.mark.django_db(transaction=True)
class TestLostReply:
    """The connection dropped after the server committed an outcome: the retry finds it."""

    def test_a_failure_whose_reply_was_lost_is_reported_retried(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        job = execute_tasks.always_fails.enqueue("smtp")
        real = leases.fail
        tries: list[bool] = []

        def commit_then_lose_the_reply(*args: Any, **kwargs: Any) -> bool:
            applied = real(*args, **kwargs)
            tries.append(applied)
            if len(tries) == 1:
                raise OperationalError("server closed the connection unexpectedly")
            return applied

        monkeypatch.setattr(leases, "fail", commit_then_lose_the_reply)
        assert execute(claim(job)) is Outcome.RETRIED
        assert tries == [True, True]
        job.refresh_from_db()
        assert (job.state, len(job.errors)) == (JobState.READY, 1)
        assert "lease lost" not in caplog.text
        assert "outcome=lease_lost" not in caplog.text


@pytest.mark.django_db
class TestGiveUp:
    def test_permanent_error_makes_the_job_dead_on_the_first_attempt(self) -> None:
        job = tasks.permanent.enqueue()
        assert execute(claim(job)) is Outcome.DEAD
        job.refresh_from_db()
        assert job.state == JobState.DEAD
        assert (job.attempts, job.max_attempts) == (1, 5)
        assert job.finished_at is not None
        assert (job.worker_id, job.lease_until) == (None, None)
        assert job.last_error_code == "PERMANENT_ERROR"
        assert "the card was declined" in job.last_error
        (entry,) = job.errors
        assert (entry["attempt"], entry["code"]) == (1, "PERMANENT_ERROR")
        assert entry["message"] == "PermanentError: the card was declined"

    def test_give_up_on_exception_type_makes_the_job_dead_at_once(self) -> None:
        job = tasks.missing_key.enqueue()
        assert execute(claim(job)) is Outcome.DEAD
        job.refresh_from_db()
        assert job.state == JobState.DEAD
        assert (job.attempts, job.max_attempts) == (1, 5)
        assert job.last_error_code == "KeyError"
        assert job.finished_at is not None

    @pytest.mark.parametrize(
        "path",
        [
            "tests.nowhere.gone",
            "tests.jobs.tasks.does_not_exist",
            "tests.jobs.tasks.plain_function",
        ],
        ids=["missing-module", "missing-attribute", "plain-function"],
    )
    def test_task_that_cannot_be_loaded_is_dead_with_task_not_found(self, path: str) -> None:
        job = JobFactory(task=path)
        outcome = execute(claim(job))
        job.refresh_from_db()
        assert outcome is Outcome.DEAD
        assert job.state == JobState.DEAD
        assert job.attempts == 1
        assert job.finished_at is not None
        assert job.last_error_code == TASK_NOT_FOUND
        assert [entry["code"] for entry in job.errors] == [TASK_NOT_FOUND]

    @pytest.mark.parametrize(
        "source",
        [
            "from django.core.exceptions import ImproperlyConfigured\n"
            "raise ImproperlyConfigured('STRIPE_KEY is not set')\n",
            "def broken(:\n    pass\n",
            "import sys\nsys.exit('no STRIPE_KEY')\n",
        ],
        ids=["raises-on-import", "syntax-error", "exits-on-import"],
    )
    def test_task_module_that_fails_to_import_is_dead_with_task_not_found(
        self, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        module = "executetests_broken_tasks"
        (tmp_path / f"{module}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, module, raising=False)
        job = JobFactory(task=f"{module}.charge")
        outcome = execute(claim(job))
        job.refresh_from_db()
        assert outcome is Outcome.DEAD
        assert (job.state, job.last_error_code) == (JobState.DEAD, TASK_NOT_FOUND)

    @pytest.mark.parametrize(
        ("task", "args", "kwargs"),
        [
            ("tests.jobs.tasks.send_invoice", [1, 2, 3], {}),
            ("tests.jobs.tasks.send_invoice", [1], {"unknown": True}),
            ("tests.jobs.tasks.send_invoice", [], {}),
            ("tests.jobs.tasks.with_context", [], {}),
        ],
        ids=["too-many-args", "unknown-kwarg", "missing-arg", "context-task-missing-arg"],
    )
    def test_arguments_that_do_not_bind_make_the_job_dead_with_bad_arguments(
        self, task: str, args: list[Any], kwargs: dict[str, Any]
    ) -> None:
        job = JobFactory(task=task, args=args, kwargs=kwargs)
        assert execute(claim(job)) is Outcome.DEAD
        job.refresh_from_db()
        assert job.state == JobState.DEAD
        assert job.attempts == 1
        assert job.last_error_code == BAD_ARGUMENTS
        assert [entry["code"] for entry in job.errors] == [BAD_ARGUMENTS]
        assert tasks.CALLS == []

    @pytest.mark.parametrize(
        ("task", "stored"),
        [
            (execute_tasks.raises_with_nul, "before\\x00after"),
            (execute_tasks.raises_with_surrogate, "before\\ud800after"),
        ],
        ids=["nul-character", "surrogate"],
    )
    def test_an_error_message_no_database_stores_is_stored_with_it_written_out(
        self, task: Any, stored: str
    ) -> None:
        job = task.enqueue()
        assert execute(claim(job)) is Outcome.RETRIED
        job.refresh_from_db()
        assert job.errors[-1]["message"] == f"ValueError: {stored}"
        assert stored in job.last_error

    def test_an_exception_whose_str_raises_is_recorded_and_its_job_dead(self) -> None:
        job = execute_tasks.raises_unprintable.enqueue()
        assert execute(claim(job)) is Outcome.DEAD
        job.refresh_from_db()
        assert (job.state, job.attempts, job.last_error_code) == (
            JobState.DEAD,
            1,
            "PERMANENT_ERROR",
        )
        assert job.errors[-1]["message"] == f"Unprintable: {UNPRINTABLE}"

    @pytest.mark.parametrize(
        "task",
        [
            tasks.returns_unserializable,
            execute_tasks.returns_nan,
            execute_tasks.returns_nul,
            execute_tasks.returns_surrogate,
            execute_tasks.returns_surrogate_key,
        ],
        ids=["module-object", "nan", "nul-character", "surrogate", "surrogate-key"],
    )
    def test_result_that_is_not_json_makes_the_job_dead_without_a_result(self, task: Any) -> None:
        job = task.enqueue()
        assert execute(claim(job)) is Outcome.DEAD
        job.refresh_from_db()
        assert job.state == JobState.DEAD
        assert job.last_error_code == RESULT_NOT_SERIALIZABLE
        assert job.result is None
        assert job.finished_at is not None

    @pytest.mark.parametrize(
        ("task", "raised"),
        [
            (tasks.returns_unserializable, "builtins.TypeError"),
            (execute_tasks.returns_nan, "builtins.ValueError"),
        ],
        ids=["module-object", "nan"],
    )
    def test_result_that_is_not_json_is_recorded_as_the_error_serialising_raised(
        self, task: Any, raised: str
    ) -> None:
        job = task.enqueue()
        assert execute(claim(job)) is Outcome.DEAD
        job.refresh_from_db()
        (entry,) = job.errors
        assert (entry["code"], entry["exception"]) == (RESULT_NOT_SERIALIZABLE, raised)
        assert job.last_error.rstrip().endswith(entry["message"])

    def test_a_result_past_max_result_bytes_makes_the_job_dead_after_one_attempt(
        self, settings: Any
    ) -> None:
        settings.DBQUEUE = {"MAX_RESULT_BYTES": 100}
        small = execute_tasks.returns_text.enqueue(98)
        assert execute(claim(small)) is Outcome.SUCCEEDED
        large = execute_tasks.returns_text.enqueue(99)
        assert execute(claim(large)) is Outcome.DEAD
        large.refresh_from_db()
        assert (large.state, large.attempts, large.result) == (JobState.DEAD, 1, None)
        (entry,) = large.errors
        assert entry["code"] == RESULT_TOO_LARGE
        assert (
            "returned 101 bytes of JSON, more than DBQUEUE['MAX_RESULT_BYTES'] (100)"
            in (entry["message"])
        )


@pytest.mark.django_db
class TestBounds:
    def test_huge_error_is_stored_within_the_size_limits(self) -> None:
        message = "start:" + "x" * 10_000 + ":end"
        job = execute_tasks.overflowing_error.enqueue(60, message)
        assert execute(claim(job)) is Outcome.RETRIED
        job.refresh_from_db()
        assert len(job.last_error) <= LAST_ERROR_LIMIT
        assert job.last_error.endswith(":end\n")
        (entry,) = job.errors
        assert len(entry["message"]) <= MESSAGE_LIMIT
        assert entry["message"].startswith("ValueError: start:xxx")
        assert len(entry["traceback"]) <= LAST_ERROR_LIMIT

    def test_deep_traceback_keeps_its_end_where_the_error_was_raised(self) -> None:
        job = execute_tasks.overflowing_error.enqueue(150, "bottom of the stack")
        assert execute(claim(job)) is Outcome.RETRIED
        job.refresh_from_db()
        assert len(job.last_error) == LAST_ERROR_LIMIT
        assert not job.last_error.startswith("Traceback")
        assert job.last_error.endswith(
            "raise ValueError(message)\nValueError: bottom of the stack\n"
        )
        (entry,) = job.errors
        assert entry["traceback"] == job.last_error

    def test_history_keeps_only_the_last_entries(self) -> None:
        job = execute_tasks.always_fails.enqueue("sync")
        outcomes = [execute(claim(job))]
        outcomes += [run_again(job.pk, f"worker-{n}") for n in range(2, 13)]
        assert outcomes == [Outcome.RETRIED] * 11 + [Outcome.DEAD]
        job.refresh_from_db()
        assert (job.state, job.attempts, job.max_attempts) == (JobState.DEAD, 12, 12)
        assert len(job.errors) == HISTORY_LIMIT == 10
        assert [entry["attempt"] for entry in job.errors] == list(range(3, 13))
        assert job.errors[-1]["worker"] == "worker-12"


@pytest.mark.django_db
class TestStaleWorker:
    def test_stale_success_after_new_owner_finished_changes_nothing(self) -> None:
        job = execute_tasks.whoami.enqueue()
        lease_a = claim(job, "worker-a")
        lease_b = steal(job.pk, "worker-b")
        assert execute(lease_b) is Outcome.SUCCEEDED
        settled = row(job.pk)
        assert execute(lease_a) is Outcome.LEASE_LOST
        assert row(job.pk) == settled
        assert settled["state"] == JobState.SUCCEEDED
        assert settled["result"]["worker_id"] == "worker-b"
        assert [(e["worker"], e["code"]) for e in settled["errors"]] == [
            ("worker-a", LEASE_EXPIRED)
        ]

    def test_stale_success_while_new_owner_runs_changes_nothing(self) -> None:
        job = tasks.send_invoice.enqueue(9)
        lease_a = claim(job, "worker-a")
        lease_b = steal(job.pk, "worker-b")
        running = row(job.pk)
        assert execute(lease_a) is Outcome.LEASE_LOST
        assert row(job.pk) == running
        assert tasks.CALLS == [("send_invoice", 9)]
        assert execute(lease_b) is Outcome.SUCCEEDED
        assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED

    @pytest.mark.parametrize("task", [tasks.flaky, tasks.permanent], ids=["retry", "give-up"])
    @pytest.mark.parametrize("new_owner_done", [False, True], ids=["b-running", "b-finished"])
    def test_stale_failure_changes_nothing(self, task: Any, new_owner_done: bool) -> None:
        job = task.enqueue("boom") if task is tasks.flaky else task.enqueue()
        lease_a = claim(job, "worker-a")
        lease_b = steal(job.pk, "worker-b")
        if new_owner_done:
            assert execute(lease_b) in (Outcome.RETRIED, Outcome.DEAD)
        before = row(job.pk)
        assert execute(lease_a) is Outcome.LEASE_LOST
        assert row(job.pk) == before
        if not new_owner_done:
            assert leases.renew([lease_b]) == {job.pk}

    @pytest.mark.parametrize("task", [tasks.noop, tasks.permanent], ids=["success", "failure"])
    def test_expired_lease_nobody_reclaimed_cannot_settle(self, task: Any) -> None:
        job = task.enqueue()
        lease = claim(job)
        expire(job.pk)
        before = row(job.pk)
        assert execute(lease) is Outcome.LEASE_LOST
        assert row(job.pk) == before
        assert before["state"] == JobState.RUNNING


@pytest.mark.django_db
class TestOutcomeLog:
    @pytest.mark.parametrize(
        ("task", "args", "outcome", "attempt"),
        [
            (tasks.send_invoice, (4,), "succeeded", "1/3"),
            (tasks.flaky, ("down",), "retried", "1/3"),
            (tasks.permanent, (), "dead", "1/5"),
        ],
        ids=["succeeded", "retried", "dead"],
    )
    def test_one_outcome_line_per_job(
        self,
        caplog: pytest.LogCaptureFixture,
        task: Any,
        args: tuple[Any, ...],
        outcome: str,
        attempt: str,
    ) -> None:
        caplog.set_level(logging.INFO, logger="django_dbqueue")
        job = task.enqueue(*args)
        execute(claim(job))
        (line,) = outcome_lines(caplog)
        assert line["id"] == str(job.pk)
        assert line["task"] == task.name
        assert line["attempt"] == attempt
        assert re.fullmatch(r"\d+\.\d+s", line["duration"])
        assert line["outcome"] == outcome

    def test_lost_lease_is_logged_as_the_outcome(self, caplog: pytest.LogCaptureFixture) -> None:
        job = tasks.noop.enqueue()
        lease_a = claim(job, "worker-a")
        steal(job.pk, "worker-b")
        caplog.set_level(logging.INFO, logger="django_dbqueue")
        execute(lease_a)
        (line,) = outcome_lines(caplog)
        assert (line["id"], line["attempt"], line["outcome"]) == (str(job.pk), "1/5", "lease_lost")


@pytest.mark.django_db
class TestCooperativeCancel:
    def test_a_task_that_honours_a_cancel_request_ends_cancelled_with_its_history(self) -> None:
        job = execute_tasks.stops_when_cancelled.enqueue()
        execute_tasks.HOOKS.append(lambda context: leases.request_cancel([context.job_id], "ops"))
        assert execute(claim(job)) is Outcome.CANCELLED
        stored = row(job.pk)
        assert execute_tasks.SEEN == [{"cancel_requested": True}]
        assert (stored["state"], stored["worker_id"], stored["lease_until"]) == (
            JobState.CANCELLED,
            None,
            None,
        )
        assert stored["finished_at"] is not None
        assert stored["last_error_code"] == CANCELLED
        assert [(e["attempt"], e["code"], e["worker"]) for e in stored["errors"]] == [
            (1, CANCELLED, "worker-a")
        ]

    def test_without_a_request_the_same_task_succeeds(self) -> None:
        job = execute_tasks.stops_when_cancelled.enqueue()
        assert execute(claim(job)) is Outcome.SUCCEEDED
        assert row(job.pk)["state"] == JobState.SUCCEEDED
        assert execute_tasks.SEEN == [{"cancel_requested": False}]


@pytest.mark.django_db
class TestJobStarted:
    """``signals.job_started``: sent when an attempt begins, before the task runs."""

    @pytest.fixture
    def started(self) -> Iterator[list[dict[str, Any]]]:
        seen: list[dict[str, Any]] = []

        def record(sender: type[Job], **kwargs: Any) -> None:
            kwargs.pop("signal")
            seen.append({"sender": sender, "calls_so_far": list(tasks.CALLS), **kwargs})

        signals.job_started.connect(record, weak=False, dispatch_uid="test-job-started")
        yield seen
        signals.job_started.disconnect(dispatch_uid="test-job-started")

    def test_sent_before_the_task_runs_with_job_attempt_and_lease_time(
        self, started: list[dict[str, Any]]
    ) -> None:
        job = tasks.send_invoice.enqueue(7)
        lease = claim(job)

        assert execute(lease) is Outcome.SUCCEEDED

        job.refresh_from_db()
        (sent,) = started
        assert sent["sender"] is Job
        assert sent["calls_so_far"] == []
        assert (sent["lease"], sent["job_id"], sent["attempt"]) == (lease, job.pk, 1)
        assert job.started_at is not None
        assert abs(sent["leased_at"] - job.started_at) < timedelta(seconds=0.01)

    def test_sent_for_every_attempt_even_one_that_cannot_run(
        self, started: list[dict[str, Any]]
    ) -> None:
        job = tasks.asks_retry.enqueue(0)
        execute(claim(job))
        execute(claim(job))
        missing = JobFactory(task="tests.jobs.tasks.no_such_task", queue="other")
        execute(claim(missing))

        assert [(sent["job_id"], sent["attempt"]) for sent in started] == [
            (job.pk, 1),
            (job.pk, 2),
            (missing.pk, 1),
        ]

    def test_a_receiver_that_raises_does_not_disturb_the_attempt(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        def broken(**_: Any) -> None:
            raise RuntimeError("the APM agent is down")

        signals.job_started.connect(broken, weak=False, dispatch_uid="test-broken")
        try:
            job = tasks.noop.enqueue()
            with caplog.at_level(logging.ERROR, logger="django.dispatch"):
                assert execute(claim(job)) is Outcome.SUCCEEDED
        finally:
            signals.job_started.disconnect(dispatch_uid="test-broken")
        assert "the APM agent is down" in caplog.text


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_an_outcome_the_database_refuses_is_written_in_its_minimal_form_on_the_first_attempt() -> (
    None
):
    """Written where it runs (``InlineWriter``: eager mode, ``run_jobs``), as the worker does."""
    with refusing(unstorable_tasks.REFUSED_TEXT):
        success = unstorable_tasks.returns.enqueue("refused")
        assert execute(claim(success)) is Outcome.DEAD
        failure = unstorable_tasks.raises.enqueue("refused")
        assert execute(claim(failure)) is Outcome.DEAD
    success.refresh_from_db()
    failure.refresh_from_db()
    assert (success.attempts, success.last_error_code) == (1, RESULT_NOT_SERIALIZABLE)
    assert (failure.attempts, failure.last_error_code) == (1, "PERMANENT_ERROR")
    assert failure.errors[-1]["message"] == "django_dbqueue.exceptions.PermanentError"
