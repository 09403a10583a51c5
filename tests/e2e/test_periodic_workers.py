"""Periodic schedules across real ``runworkers`` processes.

Each worker declares ``periodic(CRON)(tick)`` before ``runworkers`` starts, as
a project's ``tasks`` module would, and every worker schedules it: each slot
must still become one job, and a restart must follow the missed-slot policy.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_dbqueue import periodic
from django_dbqueue.models import Job, PeriodicSlot
from tests.e2e.conftest import ROOT, WorkerProcess
from tests.testapp.models import Execution
from tests.waiting import wait_until

logger = logging.getLogger(__name__)

#: Every second: slots come fast enough for a short test.
CRON = "* * * * * *"
TASK = "tests.jobs.periodic_tasks.tick"
ONE_SECOND = timedelta(seconds=1)
LAUNCH = (
    "import sys, django\n"
    "django.setup()\n"
    "from django_dbqueue.periodic import periodic\n"
    "from tests.jobs.periodic_tasks import tick\n"
    "periodic(sys.argv[1])(tick)\n"
    "from django.core.management import execute_from_command_line\n"
    "execute_from_command_line(['django-admin', 'runworkers', *sys.argv[2:]])\n"
)
ENQUEUED = re.compile(rf"periodic task={re.escape(TASK)} slot=(\S+) enqueued job id=\d+(.*)$", re.M)

pytestmark = pytest.mark.django_db(transaction=True)


class SchedulingWorker(WorkerProcess):
    """A ``runworkers`` process whose registry holds ``periodic(cron)(tick)``."""

    def __init__(self, cron: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, cron, *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def enqueued_slots(self) -> list[str]:
        """The slots this worker's log says it enqueued; fails on a deduplicated enqueue."""
        found = ENQUEUED.findall(self.log())
        assert all(suffix == "" for _, suffix in found), self.log()
        return [slot for slot, _ in found]

    def stop(self) -> None:
        self.send(signal.SIGTERM)
        assert self.wait() == 0, self.log()


StartWorker = Callable[..., SchedulingWorker]


@pytest.fixture
def start_scheduling_worker(worker_env: dict[str, str], tmp_path: Path) -> Iterator[StartWorker]:
    """``start_scheduling_worker(*runworkers_args, env=...)``; teardown kills what still runs."""
    started: list[SchedulingWorker] = []

    def start(
        *args: str, settings: dict[str, Any] | None = None, env: dict[str, str] | None = None
    ) -> SchedulingWorker:
        env = {**worker_env, **(env or {}), "DBQUEUE_OVERRIDES": json.dumps(settings or {})}
        log_path = tmp_path / f"scheduling-worker-{len(started)}.log"
        worker = SchedulingWorker(CRON, list(args), env, log_path)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def slots_of(jobs: Any) -> list[datetime]:
    return sorted(datetime.fromisoformat(job.dedupe_key.removeprefix("periodic:")) for job in jobs)


def assert_every_second(slots: list[datetime]) -> None:
    assert [later - earlier for earlier, later in pairwise(slots)] == [ONE_SECOND] * (
        len(slots) - 1
    ), slots


def test_three_workers_enqueue_each_slot_once(start_scheduling_worker: StartWorker) -> None:
    before = timezone.now()
    workers = [
        start_scheduling_worker("--poll-interval", "0.2", "--concurrency", "2") for _ in range(3)
    ]
    wait_until(lambda: Execution.objects.count() >= 4, what="four periodic jobs to run")
    for worker in workers:
        worker.stop()

    jobs = list(Job.objects.filter(task=TASK))
    slots = slots_of(jobs)
    assert len(slots) == len(set(slots)), "a slot was enqueued twice"
    assert_every_second(slots)
    # First sight records the current slot without enqueueing it.
    assert min(slots) > before
    runs = Counter(Execution.objects.values_list("job_id", flat=True))
    assert set(runs.values()) == {1}
    # Every enqueue that won its compare-and-set is logged: one per slot across all workers.
    logged = Counter(slot for worker in workers for slot in worker.enqueued_slots())
    assert sorted(logged) == [slot.isoformat() for slot in slots]
    assert set(logged.values()) == {1}
    winners = [len(worker.enqueued_slots()) for worker in workers]
    logger.info(f"{len(slots)} slots; enqueued per worker: {winners}")


def test_a_restarted_worker_enqueues_only_the_latest_missed_slot(
    start_scheduling_worker: StartWorker,
) -> None:
    first = start_scheduling_worker("--poll-interval", "0.2")
    wait_until(lambda: Execution.objects.exists(), what="a periodic job before the restart")
    first.stop()
    last_before = Job.objects.filter(task=TASK).order_by("-id").values_list("id", flat=True)[0]
    # As if the workers had stayed down for an hour: 3,600 slots missed.
    hour_ago = periodic.to_epoch(timezone.now() - timedelta(hours=1))
    PeriodicSlot.objects.filter(task=TASK).update(last_slot=hour_ago)
    restarted_at = timezone.now().replace(microsecond=0)

    second = start_scheduling_worker("--poll-interval", "0.2")
    wait_until(
        lambda: Execution.objects.filter(job_id__gt=last_before).count() >= 2,
        what="two periodic jobs after the restart",
    )
    second.stop()

    after = slots_of(Job.objects.filter(task=TASK, id__gt=last_before))
    # The first job after the restart is for the latest slot, not for an hour-old one ...
    assert after[0] >= restarted_at
    # ... and the slots from there on are consecutive: nothing of the hour was back-filled.
    assert_every_second(after)
    assert len(after) < 60


def test_workers_with_skewed_clocks_enqueue_each_slot_on_time_by_the_database_clock(
    start_scheduling_worker: StartWorker, faketime_env: Callable[[str], dict[str, str]]
) -> None:
    workers = [
        start_scheduling_worker("--poll-interval", "0.2", env=faketime_env(offset))
        for offset in ("-10m", "+10m")
    ]
    wait_until(lambda: Execution.objects.count() >= 4, what="four periodic jobs to run")
    for worker in workers:
        worker.stop()

    jobs = list(Job.objects.filter(task=TASK))
    # Neither early (a clock ahead) nor skipped (a clock behind): every second, once ...
    assert_every_second(slots_of(jobs))
    for job in jobs:
        # ... each enqueued (by the database clock) within a second or two after its slot.
        (slot,) = slots_of([job])
        assert slot <= job.created_at < slot + timedelta(seconds=2.5), (slot, job.created_at)
