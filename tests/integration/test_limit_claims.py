"""Concurrency limits in the claim, on whichever database ``DATABASE_URL`` names: a claim takes
no more of a limit's jobs than its room (its size less its running jobs), in claim order,
passes full limits by without holding anything else back, and never lets concurrent
claimers run more than a limit's size at once."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.utils import timezone

from django_dbqueue import leases, pauses
from django_dbqueue.models import Job, JobState
from tests.factories import JobFactory
from tests.integration.test_leases import WAIT, run_in_thread

pytestmark = pytest.mark.django_db(transaction=True)

SEND = "task:tests.jobs.tasks.send"
TENANT = "key:tenant:1"


def ago(seconds: float) -> datetime:
    return timezone.now() - timedelta(seconds=seconds)


def ready(key: str | None, size: int | None, **fields: Any) -> Job:
    """A due ready job under limit ``key`` of ``size`` (``None``: under no limit)."""
    fields.setdefault("run_at", ago(60))
    return JobFactory(limit_key=key, limit_size=size, **fields)


def running(key: str, size: int, **fields: Any) -> Job:
    return JobFactory(running=True, limit_key=key, limit_size=size, **fields)


def claimed(queues: list[str] | None = None, limit: int = 10, worker: str = "w2") -> list[int]:
    return [lease.job_id for lease in leases.claim(queues, worker, limit)]


def running_of(key: str) -> int:
    return Job.objects.filter(limit_key=key, state=JobState.RUNNING).count()


def test_a_claim_takes_no_more_of_a_limit_than_its_size_less_its_running_jobs() -> None:
    running(SEND, 3)
    jobs = [ready(SEND, 3, run_at=ago(60 - n)) for n in range(5)]

    assert sorted(claimed()) == [jobs[0].pk, jobs[1].pk]
    assert running_of(SEND) == 3
    assert claimed() == []


def test_a_full_limit_stays_ready_while_other_limits_and_unlimited_jobs_are_claimed() -> None:
    running(SEND, 2)
    running(SEND, 2)
    full = [ready(SEND, 2, priority=9) for _ in range(3)]
    other = [ready(TENANT, 1, priority=5) for _ in range(2)]
    free = [ready(None, None) for _ in range(2)]

    assert sorted(claimed()) == sorted([other[0].pk, free[0].pk, free[1].pk])
    assert set(
        Job.objects.filter(pk__in=[job.pk for job in full]).values_list("state", flat=True)
    ) == {JobState.READY}
    assert Job.objects.get(pk=other[1].pk).state == JobState.READY


def test_unlimited_jobs_behind_many_jobs_of_full_limits_are_claimed() -> None:
    for n in range(20):
        running(f"key:full:{n}", 1)
        for _ in range(10):
            ready(f"key:full:{n}", 1, priority=9)
    free = [ready(None, None, run_at=ago(60 - n)) for n in range(3)]

    assert claimed(limit=3) == [job.pk for job in free]


def test_limits_with_room_are_filled_in_claim_order() -> None:
    # Claim order: priority (higher first), then run_at, then id.
    later = ready(SEND, 2, priority=5, run_at=ago(10))
    first = ready(SEND, 2, priority=5, run_at=ago(20))
    tied = ready(SEND, 2, priority=5, run_at=first.run_at)
    ready(SEND, 2, priority=0, run_at=ago(30))

    assert sorted(claimed()) == [first.pk, tied.pk]
    assert Job.objects.get(pk=later.pk).state == JobState.READY


def test_jobs_of_a_limit_not_due_yet_take_none_of_its_room() -> None:
    ready(SEND, 1, priority=9, run_at=timezone.now() + timedelta(hours=1))
    due = ready(SEND, 1)

    assert claimed() == [due.pk]


def test_a_batch_keeps_the_first_jobs_in_claim_order_among_those_limits_admit() -> None:
    top = ready(None, None, priority=10)
    send = [ready(SEND, 2, priority=p) for p in (9, 8, 7)]
    tenant = [ready(TENANT, 1, priority=p) for p in (6, 5)]
    ready(None, None, priority=4)

    leased = leases.claim(None, "w2", 4)

    assert [lease.job_id for lease in leased] == [top.pk, send[0].pk, send[1].pk, tenant[0].pk]


def test_two_limits_of_two_give_two_jobs_each_to_a_batch_of_ten() -> None:
    for key in (SEND, TENANT):
        for _ in range(6):
            ready(key, 2)

    assert len(claimed(limit=10)) == 4
    assert (running_of(SEND), running_of(TENANT)) == (2, 2)


def test_a_job_that_finishes_frees_its_slot_for_the_next_claim() -> None:
    ready(SEND, 1, run_at=ago(30))
    waiting = ready(SEND, 1, run_at=ago(20))
    (lease,) = leases.claim(None, "w1", 5)
    assert claimed() == []

    assert leases.complete(lease, None)

    assert claimed() == [waiting.pk]


def test_a_job_set_to_succeeded_by_any_path_frees_its_slot() -> None:
    holder = running(SEND, 1)
    waiting = ready(SEND, 1)
    assert claimed() == []

    Job.objects.filter(pk=holder.pk).update(
        state=JobState.SUCCEEDED, worker_id=None, lease_until=None, finished_at=timezone.now()
    )

    assert claimed() == [waiting.pk]


def test_running_jobs_of_the_limit_in_other_queues_count_too() -> None:
    running(SEND, 2, queue="a")
    jobs = [ready(SEND, 2, queue="b") for _ in range(3)]

    assert claimed(["b"]) == [jobs[0].pk]


def test_limited_jobs_of_a_paused_queue_are_not_claimed() -> None:
    ready(SEND, 5, queue="a", priority=9)
    ready(SEND, 5, queue="a", priority=9)
    in_b = ready(SEND, 5, queue="b")
    pauses.pause(["a"])

    assert claimed() == [in_b.pk]
    assert claimed(["a"]) == []
    assert running_of(SEND) == 1


def test_limit_keys_differing_in_case_or_trailing_spaces_are_distinct_limits() -> None:
    running("key:T", 1)
    ready("key:T", 1)
    lower = ready("key:t", 1)
    padded = ready("key:t ", 1)

    assert sorted(claimed()) == [lower.pk, padded.pk]


@pytest.mark.locking
def test_a_claim_passes_by_a_limit_another_claim_holds_without_waiting() -> None:
    # A first claim of the limit, finished: the limit is known (MySQL writes its row).
    ready(SEND, 3)
    (first,) = leases.claim(None, "w0", 1)
    assert leases.complete(first, None)
    jobs = [ready(SEND, 3, run_at=ago(60 - n)) for n in range(4)]
    # A claim keeps the keyless jobs it reads locked until it commits, those of queues it does
    # not serve included: the holder's finds `decoy` first, keeps it locked while it leases
    # the limit's job instead, and stops there, short of `free`.
    decoy = ready(None, None, priority=-1)
    free = ready(None, None, queue="other", priority=-2)
    holding, finished = threading.Event(), threading.Event()

    def claim_and_hold() -> None:
        with transaction.atomic():
            assert [lease.job_id for lease in leases.claim(["default"], "w1", 1)] == [jobs[0].pk]
            holding.set()
            finished.wait(WAIT)

    holder = run_in_thread(claim_and_hold)
    try:
        assert holding.wait(WAIT)
        started = time.monotonic()
        assert claimed() == [free.pk]
        assert time.monotonic() - started < 5
    finally:
        finished.set()
        holder.join(WAIT)
    assert sorted(claimed()) == [jobs[1].pk, jobs[2].pk, decoy.pk]


SIZE = 3
JOBS = 60
THREADS = 6
QUEUES = ("a", "b")


def test_concurrent_claimers_never_run_more_jobs_of_a_limit_than_its_size() -> None:
    """Threads with connections of their own claim and finish jobs of one limit of 3 while the
    test counts the limit's running jobs: neither they, right after each claim, nor the test,
    polling, ever see more than 3, and every job runs once. The limit's jobs are in two
    queues, each served by half the threads, so claimers see different jobs of the limit
    first: only the limit itself, not a race for the same rows, keeps them within it."""
    for n in range(JOBS):
        ready(SEND, SIZE, queue=QUEUES[n % 2], run_at=ago(600 - n))
    deadline = time.monotonic() + WAIT
    seen: list[int] = []
    done = threading.Event()

    def claimer(worker: str, queue: str) -> None:
        pace = random.Random(worker)
        try:
            while not done.is_set() and time.monotonic() < deadline:
                held = leases.claim([queue], worker, 2)
                if not held:
                    time.sleep(pace.uniform(0.001, 0.005))
                    continue
                seen.append(running_of(SEND))
                time.sleep(pace.uniform(0.001, 0.02))
                for lease in held:
                    assert leases.complete(lease, None)
        finally:
            connections.close_all()

    polled: list[int] = []
    with ThreadPoolExecutor(THREADS) as pool:
        claimers = [pool.submit(claimer, f"w{n}", QUEUES[n % 2]) for n in range(THREADS)]
        try:
            while time.monotonic() < deadline and not any(c.done() for c in claimers):
                polled.append(running_of(SEND))
                if Job.objects.filter(limit_key=SEND, state=JobState.SUCCEEDED).count() == JOBS:
                    break
                time.sleep(0.002)
        finally:
            done.set()
        for finished_claimer in claimers:
            finished_claimer.result(timeout=WAIT)  # raises what the claimer raised
    assert max(seen + polled) <= SIZE, f"saw {max(seen + polled)} running at once"
    assert max(seen) == SIZE, "the claimers never filled the limit: the test proved nothing"
    jobs = Job.objects.filter(limit_key=SEND)
    assert set(jobs.values_list("state", "attempts")) == {(JobState.SUCCEEDED, 1)}
    assert jobs.count() == JOBS
