"""A task that forks: the child never comes back into the worker's code.

The child returns (or raises) from task code at once; it must leave on the
spot, so the job has one outcome, the parent's, the jobs after it run once
each, and no process outlives the worker.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from django_dbqueue.models import Job, JobState
from tests.e2e.conftest import WorkerProcess
from tests.jobs.hygiene_tasks import fork_and_return, write_and_report
from tests.testapp.models import Execution
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FOLLOWERS = 3


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (exited, not yet reaped)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.parametrize("child_raises", [False, True], ids=["child-returns", "child-raises"])
def test_a_forked_child_leaves_at_once_and_the_parent_records_the_outcome(
    start_worker: Callable[..., WorkerProcess], tmp_path: Path, child_raises: bool
) -> None:
    job = fork_and_return.enqueue(str(tmp_path), child_raises)
    followers = [write_and_report.enqueue() for _ in range(FOLLOWERS)]
    worker = start_worker("--burst", "--concurrency", "1")
    child = 0
    try:
        assert worker.wait() == 0, worker.log()
        child = int((tmp_path / "child").read_text())
        job.refresh_from_db()
        assert (job.state, job.result, job.attempts, job.lease_token) == (
            JobState.SUCCEEDED,
            "parent",
            1,
            1,
        ), worker.log()
        assert job.errors == []
        ran = Counter(Execution.objects.values_list("job_id", flat=True))
        assert ran == Counter({follower.pk: 1 for follower in followers}), worker.log()
        assert set(
            Job.objects.filter(pk__in=[f.pk for f in followers]).values_list("state", flat=True)
        ) == {JobState.SUCCEEDED}
        assert worker.log().count(f"job id={job.pk} ") == 1, worker.log()
        wait_until(lambda: not running(child), what=f"the forked child {child} to be gone")
    finally:
        if child and running(child):
            os.kill(child, signal.SIGKILL)
