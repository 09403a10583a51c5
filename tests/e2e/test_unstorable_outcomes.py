"""Outcomes no database stores, with real ``runworkers`` processes: each job runs once.

A result or an error holding a lone surrogate or a NUL character, an exception
whose ``__str__`` raises, a result past ``MAX_RESULT_BYTES``, and outcomes the
database refuses anyway (a trigger here): each is recorded after the attempt
that produced it, never left to the reaper to run the job again. The tasks'
short lease makes a job that is run again show within a few seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from django_dbqueue import Job, JobState
from django_dbqueue.errors import RESULT_NOT_SERIALIZABLE, RESULT_TOO_LARGE, UNPRINTABLE
from tests.e2e.conftest import WorkerProcess
from tests.jobs.unstorable_tasks import REFUSED_TEXT, raises, returns, returns_text
from tests.refusals import refusing
from tests.testapp.models import Execution
from tests.waiting import wait_until

StartWorker = Callable[..., WorkerProcess]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql]

FINISHED = (JobState.SUCCEEDED, JobState.DEAD)


def finished(jobs: list[Job]) -> list[Job] | None:
    """The jobs as stored now, once every one of them is finished; else ``None``."""
    current = list(Job.objects.filter(pk__in=[job.pk for job in jobs]).order_by("pk"))
    return current if all(job.state in FINISHED for job in current) else None


def executions(job: Job) -> int:
    """How many times the job's task ran (each attempt records a row)."""
    count: int = Execution.objects.filter(job_id=job.pk).count()
    return count


def summary(job: Job) -> tuple[str, str, int]:
    """State, error code and how many times the task ran."""
    return job.state, job.last_error_code, executions(job)


def test_results_and_errors_no_database_stores_are_recorded_and_never_run_again(
    start_worker: StartWorker,
) -> None:
    results = {kind: returns.enqueue(kind) for kind in ("surrogate", "surrogate-key", "nul")}
    errors = {
        kind: raises.enqueue(kind)
        for kind in ("permanent-surrogate", "permanent-nul", "unprintable", "retried-surrogate")
    }
    worker = start_worker("--concurrency", "2", "--poll-interval", "0.2")

    jobs = [*results.values(), *errors.values()]
    done = {job.pk: job for job in wait_until(lambda: finished(jobs), what="every job finished")}

    for job in results.values():
        assert summary(done[job.pk]) == (JobState.DEAD, RESULT_NOT_SERIALIZABLE, 1)
        assert done[job.pk].result is None
    for kind in ("permanent-surrogate", "permanent-nul", "unprintable"):
        assert summary(done[errors[kind].pk]) == (JobState.DEAD, "PERMANENT_ERROR", 1)
    messages = {kind: done[job.pk].errors[-1]["message"] for kind, job in errors.items()}
    assert messages["permanent-surrogate"] == "PermanentError: perm \\ud800"
    assert messages["permanent-nul"] == "PermanentError: perm \\x00"
    assert messages["unprintable"] == f"Unprintable: {UNPRINTABLE}"
    retried = done[errors["retried-surrogate"].pk]
    assert summary(retried) == (JobState.DEAD, "RuntimeError", 2)  # its retry, then dead
    assert [entry["message"] for entry in retried.errors] == ["RuntimeError: retry \\udfff"] * 2
    assert worker.process.poll() is None
    assert "could not be written" not in worker.log()


def test_a_result_past_max_result_bytes_is_dead_result_too_large_after_one_execution(
    start_worker: StartWorker,
) -> None:
    fits, too_large = returns_text.enqueue(998), returns_text.enqueue(999)  # 1000, 1001 bytes
    start_worker("--poll-interval", "0.2", settings={"MAX_RESULT_BYTES": 1000})

    fits, too_large = wait_until(lambda: finished([fits, too_large]), what="both finished")

    assert (fits.state, fits.result, executions(fits)) == (JobState.SUCCEEDED, "x" * 998, 1)
    assert summary(too_large) == (JobState.DEAD, RESULT_TOO_LARGE, 1)
    assert too_large.result is None
    assert "more than DBQUEUE['MAX_RESULT_BYTES'] (1000)" in too_large.errors[-1]["message"]


@pytest.fixture
def refusing_trigger(transactional_db: None) -> Iterator[None]:
    """PostgreSQL refuses any job write whose error or result holds ``REFUSED_TEXT``."""
    with refusing(REFUSED_TEXT):
        yield


@pytest.mark.usefixtures("refusing_trigger")
def test_an_outcome_the_database_refuses_is_written_minimal_and_never_run_again(
    start_worker: StartWorker,
) -> None:
    success, failure = returns.enqueue("refused"), raises.enqueue("refused")
    worker = start_worker("--poll-interval", "0.2")

    success, failure = wait_until(lambda: finished([success, failure]), what="both finished")

    # The success could not be stored: the job failed, with the refusal's class only.
    assert summary(success) == (JobState.DEAD, RESULT_NOT_SERIALIZABLE, 1)
    assert success.errors[-1]["exception"].startswith("django.db.utils.")  # the refusal's
    # The failure could not be stored in full: its code and class were.
    assert summary(failure) == (JobState.DEAD, "PERMANENT_ERROR", 1)
    assert failure.errors[-1]["message"] == "django_dbqueue.exceptions.PermanentError"
    assert "in its minimal form instead" in worker.log()
    # The refused success's outcome line carries the code written, not "-".
    outcome_line = f"job id={success.pk} task={success.task} attempt=1/"
    line = wait_until(
        lambda: next((ln for ln in worker.log().splitlines() if outcome_line in ln), None),
        what="the refused success's outcome line",
    )
    assert "outcome=dead code=RESULT_NOT_SERIALIZABLE" in line
    assert worker.process.poll() is None
