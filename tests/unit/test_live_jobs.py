"""The registry of running attempts: what wakes the heartbeat."""

from __future__ import annotations

from django.utils import timezone

from django_dbqueue.context import JobContext
from django_dbqueue.leases import Lease
from django_dbqueue.worker.live import LiveJobs


def context(job_id: int, lease_seconds: int = 30, lease_token: int = 1) -> JobContext:
    lease = Lease(
        job_id, lease_token, "w1", "t", [], {}, lease_token, 5, timezone.now(), lease_seconds, "q"
    )
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
    first, second = context(1), context(2)
    live.add([(first, None), (second, None)])
    assert live.start(first.lease) is True

    withdrawn = {job.context.job_id: started for job, started in live.withdraw()}

    assert withdrawn == {1: True, 2: False}
    assert live.start(second.lease) is False  # its slot came too late: released unrun
    assert len(live) == 0


def test_a_removed_job_is_no_longer_started_when_its_id_comes_back() -> None:
    live = LiveJobs()
    first = context(1)
    live.add([(first, None)])
    live.start(first.lease)
    live.remove([first.lease])
    live.add([(context(1, lease_token=2), None)])  # claimed again by this worker
    assert live.withdraw()[0][1] is False


def test_a_job_claimed_again_while_its_earlier_attempt_runs_keeps_both_and_loses_the_earlier() -> (
    None
):
    live = LiveJobs()
    earlier, later = context(1, lease_token=1), context(1, lease_token=2)
    live.add([(earlier, None)])
    live.start(earlier.lease)

    live.add([(later, None)])  # its lease lapsed and the reaper returned it: claimed again here

    assert earlier.lease_lost.is_set()
    assert not later.lease_lost.is_set()
    assert {job.context.lease.lease_token for job in live.all()} == {1, 2}
    live.remove([earlier.lease])  # the earlier attempt ends: the later one stays live
    assert live.get(earlier.lease) is None
    assert [job.context for job in live.all()] == [later]
    live.add([(context(2), None)])
    assert not later.lease_lost.is_set()  # another job's claim supersedes nothing
