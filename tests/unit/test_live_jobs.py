"""The registry of running attempts: what wakes the heartbeat."""

from __future__ import annotations

from django.utils import timezone

from django_dbqueue.context import JobContext
from django_dbqueue.leases import Lease
from django_dbqueue.worker.live import LiveJobs


def context(job_id: int, lease_seconds: int) -> JobContext:
    lease = Lease(job_id, 1, "w1", "t", [], {}, 1, 5, timezone.now(), lease_seconds, "default")
    return JobContext(lease)


def test_only_a_job_with_a_shorter_lease_than_planned_wakes_the_heartbeat() -> None:
    live = LiveJobs()
    live.wait_for_shorter_lease(30, timeout=0)  # the heartbeat plans for 30 s leases

    live.add([(context(1, 30), None)])
    live.add([(context(2, 60), None)])
    assert not live.added.is_set()  # no earlier beat needed: nobody is woken

    live.add([(context(3, 10), None)])
    assert live.added.is_set()
    assert len(live) == 3


def test_before_the_heartbeat_plans_any_added_job_wakes_it() -> None:
    live = LiveJobs()
    live.add([(context(1, 600), None)])
    assert live.added.is_set()


def test_withdraw_tells_which_jobs_started_and_a_withdrawn_job_never_starts() -> None:
    live = LiveJobs()
    live.add([(context(1, 30), None), (context(2, 30), None)])
    assert live.start(1) is True

    withdrawn = {job.context.job_id: started for job, started in live.withdraw()}

    assert withdrawn == {1: True, 2: False}
    assert live.start(2) is False  # its slot came too late: released unrun, it must not run
    assert len(live) == 0


def test_a_removed_job_is_no_longer_started_when_its_id_comes_back() -> None:
    live = LiveJobs()
    live.add([(context(1, 30), None)])
    live.start(1)
    live.remove([1])
    live.add([(context(1, 30), None)])  # claimed again by this worker
    assert live.withdraw()[0][1] is False
