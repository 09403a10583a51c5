"""Concurrency limits in the claim, on whichever database ``DATABASE_URL`` names: a claim takes
no more of a limit's jobs than its room (its size less its running jobs), in claim order,
passes full limits by without holding anything else back, and never lets concurrent
claimers run more than a limit's size at once. A rate's claims start no more of its jobs
than its GCRA admits, to the microsecond, whatever the number of claimers."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_dbqueue import leases, pauses, sql
from django_dbqueue.models import Job, JobState, RateBucket
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


PACED = "task:tests.jobs.limit_tasks.paced"


@pytest.fixture
def stopped_clock(monkeypatch: pytest.MonkeyPatch) -> datetime:
    """SQLite's statements read the host clock: stop it 50 ms before a whole second, so a
    pace 50 ms ahead is due on the second (stored with no fraction) and one a microsecond
    later in the next second."""
    stopped = timezone.now().replace(microsecond=950_000)
    monkeypatch.setattr(timezone, "now", lambda: stopped)
    return stopped


def paced_jobs(rate: float, size: int | None = None, count: int = 12) -> None:
    for _ in range(count):
        ready(PACED, size, limit_rate=rate)


def pace(due_at: datetime, rate: float = 20) -> None:
    RateBucket.objects.create(limit_key=PACED, due_at=due_at, rate=rate)


#: (rate, how far the pace lies ahead of the clock in microseconds or None for no pace,
#: the starts a claim admits): max(0, floor(burst - 1 - d * rate + 1e-9) + 1).
GCRA_CASES = [
    (20, None, 2),  # burst max(1, floor(20 / 10)): no bucket is a full one
    (20, -5_000_000, 2),  # a pace behind the clock is no pace
    (20, 0, 2),
    (20, 49_999, 1),
    (20, 50_000, 1),  # exactly one period ahead: 1 - 1 + 1e-9 admits one
    (20, 50_001, 0),
    (20, 100_000, 0),  # floor(-1 + 1e-9) + 1 is 0, where truncating would give 1
    (100, 80_000, 2),
    (100, 80_001, 1),
    (100, 90_000, 1),
    (0.5, 0, 1),
    (0.5, 1, 0),
]


@pytest.mark.sqlite
@pytest.mark.parametrize(("rate", "ahead", "admitted"), GCRA_CASES)
def test_on_sqlite_a_rate_admits_its_gcra_starts_to_the_microsecond(
    stopped_clock: datetime, rate: float, ahead: int | None, admitted: int
) -> None:
    """A rate-only limit (no size) admits max(0, floor(burst - 1 - d * rate + 1e-9) + 1)
    starts, d being how far its pace lies ahead of the clock, to the microsecond."""
    paced_jobs(rate)
    if ahead is not None:
        pace(stopped_clock + timedelta(microseconds=ahead), rate)

    assert len(claimed()) == admitted


@pytest.mark.sqlite
def test_on_sqlite_a_claim_moves_the_pace_by_the_starts_it_made_and_no_other(
    stopped_clock: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    paced_jobs(20)
    pace(stopped_clock + timedelta(milliseconds=10))

    assert len(claimed(worker="w1")) == 1
    assert RateBucket.objects.get().due_at == stopped_clock + timedelta(milliseconds=60)
    # The same worker again at the same instant: nothing admitted, nothing moved.
    assert claimed(worker="w1") == []
    assert RateBucket.objects.get().due_at == stopped_clock + timedelta(milliseconds=60)
    workers = Job.objects.filter(state=JobState.RUNNING).values_list("worker_id", flat=True)
    assert set(workers) == {"w1"}

    later = stopped_clock + timedelta(seconds=5)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert len(claimed()) == 2
    bucket = RateBucket.objects.get()
    assert (bucket.due_at, bucket.rate) == (later + timedelta(milliseconds=100), 20)


@pytest.mark.sqlite
def test_on_sqlite_a_new_pace_starts_at_the_claim_and_a_size_caps_the_rate(
    stopped_clock: datetime,
) -> None:
    for _ in range(2):
        running(PACED, 3, limit_rate=100)
    paced_jobs(100, size=3)

    assert len(claimed()) == 1
    assert RateBucket.objects.get().due_at == stopped_clock + timedelta(milliseconds=10)


@pytest.mark.sqlite
def test_on_sqlite_an_idle_claimer_wakes_when_the_burst_has_room_again(
    stopped_clock: datetime,
) -> None:
    ready(PACED, None, limit_rate=20, queue="a")
    pace(stopped_clock + timedelta(seconds=1))

    assert claimed() == []
    # 1 s ahead with a burst of 2: one start is due one period (50 ms) before that.
    assert leases.next_due(["a"]) == pytest.approx(0.95, abs=0.001)
    assert leases.next_due(["b"]) is None


EPOCH = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)


@pytest.fixture
def frozen_database_clock() -> Iterator[Callable[[datetime], None]]:
    """MySQL/MariaDB's statements read the database clock (UTC_TIMESTAMP): stop it, on this
    test's connection, at the instant ``freeze(at)`` names; it runs again afterwards."""

    def freeze(at: datetime) -> None:
        microseconds = (at - EPOCH) // timedelta(microseconds=1)
        with connection.cursor() as cursor:
            cursor.execute("SET timestamp = %s", [Decimal(microseconds).scaleb(-6)])

    yield freeze
    with connection.cursor() as cursor:
        cursor.execute("SET timestamp = DEFAULT")


@pytest.fixture
def stopped_database_clock(frozen_database_clock: Callable[[datetime], None]) -> datetime:
    """The database clock stopped 50 ms before a whole second (as ``stopped_clock``)."""
    stopped = timezone.now().replace(microsecond=950_000)
    frozen_database_clock(stopped)
    return stopped


@pytest.mark.mysql
@pytest.mark.parametrize(("rate", "ahead", "admitted"), GCRA_CASES)
def test_on_mysql_a_rate_admits_its_gcra_starts_to_the_microsecond(
    stopped_database_clock: datetime, rate: float, ahead: int | None, admitted: int
) -> None:
    """As on SQLite: max(0, floor(burst - 1 - d * rate + 1e-9) + 1) starts, d read after the
    limit's row lock, to the microsecond."""
    paced_jobs(rate)
    if ahead is not None:
        pace(stopped_database_clock + timedelta(microseconds=ahead), rate)

    assert len(claimed()) == admitted


@pytest.mark.mysql
def test_on_mysql_a_claim_moves_the_pace_by_the_starts_it_made_and_no_other(
    stopped_database_clock: datetime, frozen_database_clock: Callable[[datetime], None]
) -> None:
    paced_jobs(20)
    pace(stopped_database_clock + timedelta(milliseconds=10))

    assert len(claimed(worker="w1")) == 1
    assert RateBucket.objects.get().due_at == stopped_database_clock + timedelta(milliseconds=60)
    assert claimed(worker="w1") == []
    assert RateBucket.objects.get().due_at == stopped_database_clock + timedelta(milliseconds=60)

    later = stopped_database_clock + timedelta(seconds=5)
    frozen_database_clock(later)
    assert len(claimed()) == 2
    bucket = RateBucket.objects.get()
    assert (bucket.due_at, bucket.rate) == (later + timedelta(milliseconds=100), 20)


@pytest.mark.mysql
def test_on_mysql_a_new_pace_starts_at_the_claim_and_a_size_caps_the_rate(
    stopped_database_clock: datetime,
) -> None:
    for _ in range(2):
        running(PACED, 3, limit_rate=100)
    paced_jobs(100, size=3)

    assert len(claimed()) == 1
    assert RateBucket.objects.get().due_at == stopped_database_clock + timedelta(milliseconds=10)


@pytest.mark.mysql
def test_on_mysql_an_idle_claimer_wakes_when_the_burst_has_room_again(
    stopped_database_clock: datetime,
) -> None:
    ready(PACED, None, limit_rate=20, queue="a")
    pace(stopped_database_clock + timedelta(seconds=1))

    assert claimed() == []
    assert leases.next_due(["a"]) == pytest.approx(0.95, abs=1e-6)
    assert leases.next_due(["b"]) is None


def test_limits_whose_pace_is_spent_leave_the_claim_to_limits_behind_them() -> None:
    now = timezone.now()
    for key in ("key:a", "key:b", "key:c"):
        ready(key, None, limit_rate=1, priority=9)
        RateBucket.objects.create(limit_key=key, due_at=now + timedelta(hours=1), rate=1)
    behind = ready("key:d", None, limit_rate=1)

    assert claimed(limit=2) == [behind.pk]


#: The rate of the concurrent test and how many of its jobs it drains: the burst (5), then
#: one start every 20 ms (a whole number of microseconds: the pace is exact) for about 1 s.
CONCURRENT_RATE = 50
PACED_JOBS = 55


@pytest.mark.locking
def test_concurrent_claimers_never_start_a_rate_s_jobs_faster_than_its_gcra_allows() -> None:
    """Threads with connections of their own claim jobs of one rate (50/s, burst 5) from two
    queues until all have started: any k consecutive starts (by started_at, the database
    clock) span at least (k - burst) / rate seconds, so no window of T seconds holds more than
    burst + T * rate of them, and every job starts once."""
    for n in range(PACED_JOBS):
        ready(PACED, None, limit_rate=CONCURRENT_RATE, queue=QUEUES[n % 2], run_at=ago(600 - n))
    deadline = time.monotonic() + WAIT

    def claimer(worker: str, queue: str) -> None:
        pace = random.Random(worker)
        try:
            while time.monotonic() < deadline:
                if not leases.claim([queue], worker, 3):
                    if not Job.objects.filter(queue=queue, state=JobState.READY).exists():
                        return
                    time.sleep(pace.uniform(0.0005, 0.003))
        finally:
            connections.close_all()

    with ThreadPoolExecutor(THREADS) as pool:
        claimers = [pool.submit(claimer, f"w{n}", QUEUES[n % 2]) for n in range(THREADS)]
        for finished_claimer in claimers:
            finished_claimer.result(timeout=WAIT)
    jobs = Job.objects.filter(limit_key=PACED)
    assert set(jobs.values_list("state", "attempts")) == {(JobState.RUNNING, 1)}
    starts = sorted(jobs.values_list("started_at", flat=True))
    assert len(starts) == PACED_JOBS
    burst = CONCURRENT_RATE // 10
    tightest = min(
        (starts[j] - starts[i]).total_seconds() * CONCURRENT_RATE - (j - i + 1 - burst)
        for i in range(len(starts))
        for j in range(i + burst, len(starts))
    )
    assert tightest >= -1e-6, f"{tightest:.6f} periods short: the rate was exceeded"


def bucket_lock_awaited() -> bool:
    """Whether another session waits for a lock on dbqueue_rate_bucket."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_locks WHERE NOT granted "
            "AND relation = 'dbqueue_rate_bucket'::regclass"
        )
        return cursor.fetchone() is not None


@pytest.mark.postgresql
def test_a_limited_job_made_ready_while_a_claim_runs_waits_for_the_next_claim() -> None:
    """A dead job requeued after the claim's snapshot, which the limited path's fresher
    snapshots find ready, is left ready: the claim starts the job ready in its snapshot, its
    pace moved on once, instead of failing on the requeued job's older version (its budget
    spent: the attempts CHECK) or pacing it twice."""
    first = ready(PACED, None, limit_rate=20, run_at=ago(60))
    requeued = JobFactory(dead=True, limit_key=PACED, limit_rate=20, run_at=ago(30))
    holding, release = threading.Event(), threading.Event()
    leased: list[leases.Lease] = []

    def hold_the_bucket() -> None:
        with transaction.atomic():
            connection.cursor().execute("LOCK TABLE dbqueue_rate_bucket IN ACCESS EXCLUSIVE MODE")
            holding.set()
            release.wait(WAIT)

    holder = run_in_thread(hold_the_bucket)
    try:
        assert holding.wait(WAIT)
        # The claim takes its snapshot, finds `first` and waits to read the limit's pace.
        claim = run_in_thread(lambda: leased.extend(leases.claim(None, "w1", 10)))
        deadline = time.monotonic() + WAIT
        while not bucket_lock_awaited():
            assert time.monotonic() < deadline, "the claim never reached the pace"
            time.sleep(0.01)
        Job.objects.filter(pk=requeued.pk).update(
            state=JobState.READY, finished_at=None, max_attempts=requeued.attempts + 1
        )
    finally:
        release.set()
        holder.join(WAIT)
    claim.join(WAIT)
    assert [lease.job_id for lease in leased] == [first.pk]
    started = Job.objects.get(pk=first.pk).started_at
    assert RateBucket.objects.get(limit_key=PACED).due_at == started + timedelta(seconds=1 / 20)
    later = Job.objects.get(pk=requeued.pk)
    assert (later.state, later.attempts) == (JobState.READY, requeued.attempts)


TRANSACTION = {"BEGIN", "COMMIT", "ROLLBACK"}


def statements_of(queries: CaptureQueriesContext) -> list[str]:
    """The statements captured, less the transaction's own BEGIN and COMMIT."""
    return [query["sql"] for query in queries.captured_queries if query["sql"] not in TRANSACTION]


@pytest.mark.mysql
def test_on_mysql_a_claim_with_no_limited_job_ready_runs_no_limit_statement() -> None:
    """Free when unused: with no limited job ready the claim runs its probe (one index
    probe) and none of the statements marked ``/* if previous */``, so nothing reads
    dbqueue_limit or dbqueue_rate_bucket; with one ready, every statement runs."""
    ready(None, None)
    ready(SEND, 1, state=JobState.SUCCEEDED, finished_at=ago(1))
    block = sql.statements("mysql")["claim"].split(sql.STATEMENT_END)
    unmarked = [s for s in block if not s.lstrip().startswith(sql.IF_PREVIOUS)]

    with CaptureQueriesContext(connection) as plain:
        assert len(claimed()) == 1
    ready(SEND, 1)
    with CaptureQueriesContext(connection) as limited:
        assert len(claimed()) == 1

    ran = statements_of(plain)
    assert len(ran) == len(unmarked)
    assert not any("dbqueue_limit" in text or "dbqueue_rate_bucket" in text for text in ran)
    assert len(statements_of(limited)) == len(block)
