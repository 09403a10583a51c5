"""Finished jobs move out of the table the claim reads into history tables (PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from io import StringIO
from typing import NamedTuple

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from pytest_django import Settings

from django_dbqueue import dependencies, history, leases, reaper
from django_dbqueue.dependencies import DEPENDENCY_FAILED
from django_dbqueue.errors import ErrorInfo
from django_dbqueue.models import UNFINISHED_STATES as UNFINISHED
from django_dbqueue.models import Job, JobState
from tests.jobs import tasks
from tests.raw_session import raw_session
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def claim_one(worker_id: str = "w1") -> leases.Lease:
    (lease,) = leases.claim(None, worker_id, 1)
    return lease


def table_of(job_id: int) -> str:
    """The table that holds job ``job_id``: dbqueue_job itself or one of its history tables."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM dbqueue_job WHERE id = %s", [job_id])
        (name,) = cursor.fetchone()
    return name


def moved() -> int:
    return history.sweep(connection)


def succeeded_table(start: datetime, days: int = 1) -> str:
    """The name of the table of jobs that succeeded in the ``days`` from ``start``."""
    return f"dbqueue_job_succeeded_{start:%Y%m%d}_{start + timedelta(days=days):%Y%m%d}"


@pytest.mark.postgresql
def test_each_finished_job_moves_to_its_history_table_and_is_still_found_by_id() -> None:
    succeeded, dead, cancelled, ready = (tasks.noop.enqueue() for _ in range(4))
    assert leases.complete(claim_one(), {"n": 1})
    assert leases.fail(claim_one(), ErrorInfo("BOOM", "boom"))
    assert leases.cancel([cancelled.id]) == [cancelled.id]

    assert moved() == 3

    today = timezone.now().astimezone(dt_timezone.utc)
    assert table_of(succeeded.id) == succeeded_table(today)
    assert table_of(dead.id) == table_of(cancelled.id) == "dbqueue_job_ended"
    assert table_of(ready.id) == "dbqueue_job"
    with connection.cursor() as cursor:
        cursor.execute("SELECT array_agg(id) FROM ONLY dbqueue_job")
        assert cursor.fetchone() == ([ready.id],)
    assert Job.objects.get(pk=succeeded.id).result == {"n": 1}
    assert Job.objects.get(pk=dead.id).last_error_code == "BOOM"
    assert Job.objects.filter(state=JobState.CANCELLED).get().pk == cancelled.id
    assert moved() == 0


@pytest.mark.postgresql
def test_a_history_table_has_the_indexes_of_dbqueue_job_but_those_of_unfinished_jobs() -> None:
    history.prepare(connection)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index "
            "WHERE indrelid = 'dbqueue_job_ended'::regclass"
        )
        indexes = [definition for (definition,) in cursor.fetchall()]

    assert not [index for index in indexes if any(f"'{s}'" in index for s in UNFINISHED)]
    for kept in ("(id)", "(queue, id)", "(task, id)", "(finished_at)", "'dead'", "'cancelled'"):
        assert any(kept in index for index in indexes), (kept, indexes)


@pytest.mark.postgresql
def test_a_history_table_refuses_to_hold_an_unfinished_job() -> None:
    job = tasks.noop.enqueue()
    assert leases.complete(claim_one(), None)
    assert moved() == 1
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.id).update(state=JobState.READY, finished_at=None)
    assert Job.objects.get(pk=job.id).state == JobState.SUCCEEDED


@pytest.mark.postgresql
def test_a_stale_worker_cannot_complete_a_job_that_moved() -> None:
    job = tasks.noop.enqueue()
    stale = claim_one("w1")
    Job.objects.filter(pk=job.id).update(lease_until=timezone.now() - timedelta(seconds=1))
    reaper.reap()
    Job.objects.filter(pk=job.id).update(run_at=timezone.now() - timedelta(seconds=1))
    current = claim_one("w2")
    assert leases.complete(current, "current")
    assert moved() == 1

    assert not leases.complete(stale, "stale")
    assert leases.renew_all([stale]).lost == {job.id}
    assert leases.settled_by([stale]) == {}
    assert Job.objects.get(pk=job.id).result == "current"


@pytest.mark.postgresql
def test_a_lost_completion_reply_is_still_reported_succeeded_after_the_move() -> None:
    job = tasks.noop.enqueue()
    lease = claim_one()
    assert leases.complete_many([(lease, '{"n": 1}')]).completed == {job.id}
    assert moved() == 1

    assert leases.complete_many([(lease, '{"n": 1}')]).completed == {job.id}
    assert leases.settled_by([lease]) == {job.id: JobState.SUCCEEDED}
    assert leases.renew_all([lease]).lost == set()


@pytest.mark.postgresql
def test_a_dead_job_requeued_from_history_keeps_its_id_and_history_and_runs_again() -> None:
    job = tasks.noop.using(dedupe_key="k").enqueue()
    assert leases.fail(claim_one(), ErrorInfo("BOOM", "boom"))
    assert moved() == 1

    assert leases.requeue([job.id], 1, actor="test") == [job.id]

    assert table_of(job.id) == "dbqueue_job"
    requeued = Job.objects.get(pk=job.id)
    assert (requeued.state, requeued.dedupe_key, requeued.max_attempts) == (
        JobState.READY,
        "k",
        job.max_attempts + 1,
    )
    assert [entry["code"] for entry in requeued.errors] == ["BOOM"]
    lease = claim_one()
    assert (lease.job_id, lease.attempt) == (job.id, 2)
    assert leases.complete(lease, "again")
    assert moved() == 1
    assert Job.objects.get(pk=job.id).result == "again"


@pytest.mark.postgresql
def test_a_workflow_resumes_from_history_when_its_dead_dependency_is_requeued() -> None:
    first = tasks.echo.enqueue("a")
    then = tasks.echo.using(after=[first]).enqueue("b")
    assert leases.fail(claim_one(), ErrorInfo("BOOM", "boom"))
    assert Job.objects.get(pk=then.id).last_error_code == DEPENDENCY_FAILED
    assert moved() == 2
    assert table_of(then.id) == "dbqueue_job_ended"

    report = leases.requeue_report([first.id], 1, actor="test")

    assert report.waiting_again == [then.id]
    assert Job.objects.get(pk=then.id).state == JobState.WAITING
    assert leases.complete(claim_one(), "a")
    assert Job.objects.get(pk=then.id).state == JobState.READY
    assert moved() == 1
    assert dependencies.results(then.id) == ["a"]


@pytest.mark.postgresql
def test_a_job_can_wait_for_a_dependency_that_moved() -> None:
    first = tasks.echo.enqueue("a")
    assert leases.complete(claim_one(), "a")
    assert moved() == 1

    then = tasks.echo.using(after=[first]).enqueue("b")

    assert Job.objects.get(pk=then.id).state == JobState.READY


@contextmanager
def moving() -> Iterator[None]:
    """Inside: another session has moved every finished job to history, not yet committed;
    it commits on the way out."""
    history.prepare(connection)
    with raw_session() as mover:
        mover.execute("SELECT dbqueue_move_finished(100, 1, NULL, NULL)")
        yield
        mover.commit()


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """``call`` started on a thread with a connection of its own; what it returned or
    raised lands in the list."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # noqa: BLE001 - the test asserts on it
            outcome.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def wait_for_lock_wait(fragment: str) -> None:
    """Until another session waits for a lock in a statement holding ``fragment``."""
    with raw_session(autocommit=True) as watcher:
        wait_until(
            lambda: watcher.execute(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND position(%s in query) > 0",
                [fragment],
            ).fetchone(),
            what=f"a statement with {fragment!r} waiting for a lock",
        )


@pytest.mark.postgresql
def test_an_enqueue_waiting_for_a_dependency_being_moved_finds_it_in_history() -> None:
    first = tasks.echo.enqueue("a")
    assert leases.complete(claim_one(), "a")
    with moving():
        thread, outcome = in_thread(lambda: tasks.echo.using(after=[first]).enqueue("b"))
        wait_for_lock_wait("FOR KEY SHARE")
    thread.join(30)

    (then,) = outcome
    assert isinstance(then, Job), then
    assert Job.objects.get(pk=then.id).state == JobState.READY
    assert table_of(first.id) == succeeded_table(timezone.now().astimezone(dt_timezone.utc))


@pytest.mark.postgresql
def test_a_dependent_moving_while_a_dependency_settles_keeps_its_count_of_pending_edges() -> None:
    first, second = tasks.echo.enqueue("a"), tasks.echo.enqueue("b")
    then = tasks.echo.using(after=[first, second]).enqueue("c")
    assert leases.fail(claim_one(), ErrorInfo("BOOM", "boom"))
    assert Job.objects.get(pk=then.id).state == JobState.CANCELLED
    lease = claim_one()
    with moving():
        thread, outcome = in_thread(lambda: leases.complete(lease, "b"))
        wait_for_lock_wait("FOR UPDATE")
    thread.join(30)

    assert outcome == [True]
    assert table_of(then.id) == "dbqueue_job_ended"
    assert Job.objects.get(pk=then.id).pending_dependencies == 1
    assert leases.requeue_report([first.id], 1, actor="test").waiting_again == [then.id]
    assert leases.complete(claim_one(), "a")
    assert Job.objects.get(pk=then.id).state == JobState.READY


@pytest.mark.postgresql
def test_finished_jobs_that_moved_are_deleted_past_retention_and_on_request(
    settings: Settings,
) -> None:
    old, chosen = tasks.noop.enqueue(), tasks.noop.enqueue()
    assert leases.complete(claim_one(), None)
    assert leases.complete(claim_one(), None)
    assert moved_while_young(settings, SUCCEEDED_RETENTION=timedelta(0)) == 2

    assert reaper.delete_finished([chosen.id]) == [chosen.id]
    assert reaper.purge() == 1
    assert not Job.objects.filter(pk__in=[old.id, chosen.id]).exists()


@pytest.mark.postgresql
@pytest.mark.parametrize("days", [1, 7])
def test_the_tables_of_this_period_and_the_next_are_created_ahead(
    settings: Settings, days: int
) -> None:
    settings.DBQUEUE = {"HISTORY_TABLE_DAYS": days}
    # 2026-12-31 is 20,818 days after 1970-01-01: a period of 7 days starts on 2026-12-31.
    last_second = datetime(2026, 12, 31, 23, 59, 59, tzinfo=dt_timezone.utc)

    names = history.prepare(connection, at=last_second)

    start = datetime(2026, 12, 31, tzinfo=dt_timezone.utc)
    assert names == [
        succeeded_table(start, days),
        succeeded_table(start + timedelta(days=days), days),
        "dbqueue_job_ended",
    ]
    last, first = tasks.noop.enqueue(), tasks.noop.enqueue()
    assert leases.complete(claim_one(), None)
    assert leases.complete(claim_one(), None)
    next_period = start + timedelta(days=days)
    Job.objects.filter(pk=last.id).update(finished_at=next_period - timedelta(microseconds=1))
    Job.objects.filter(pk=first.id).update(finished_at=next_period)
    assert moved() == 2
    assert table_of(last.id) == succeeded_table(start, days)
    assert table_of(first.id) == succeeded_table(next_period, days)


@pytest.mark.parametrize("vendor", ["mysql", "sqlite"])
def test_every_job_stays_in_the_job_table_where_they_are_not_kept_apart(vendor: str) -> None:
    if connection.vendor != vendor:
        pytest.skip(f"{vendor} only")
    job = tasks.noop.enqueue()
    assert leases.complete(claim_one(), None)

    assert not history.kept_apart(connection)
    assert moved() == 0
    assert leases.requeue([job.id], 1, actor="test") == []
    assert Job.objects.get(pk=job.id).state == JobState.SUCCEEDED


def history_tables() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits "
            "WHERE inhparent = 'dbqueue_job'::regclass"
        )
        return {name for (name,) in cursor.fetchall()}


def succeeded_at(finished_at: datetime) -> Job:
    """A job completed by a worker, then stamped as finished at ``finished_at``."""
    job = tasks.echo.enqueue("x")
    assert leases.complete(claim_one(), "x")
    Job.objects.filter(pk=job.id).update(finished_at=finished_at)
    return job


def moved_while_young(settings: Settings, **later: object) -> int:
    """Move every finished job, as the reaper did while they were young (a retention that
    keeps them all), then set ``DBQUEUE`` to ``later``; how many moved."""
    settings.DBQUEUE = {"SUCCEEDED_RETENTION": None}
    count = moved()
    settings.DBQUEUE = later
    return count


def start_of_day(days_ago: int) -> datetime:
    now = timezone.now().astimezone(dt_timezone.utc)
    return now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=days_ago)


@pytest.mark.postgresql
@pytest.mark.parametrize("whole_tables", [False, True])
def test_retention_drops_the_history_tables_it_passed_whole_and_keeps_the_others(
    settings: Settings, whole_tables: bool
) -> None:
    three_days = succeeded_at(start_of_day(3) + timedelta(hours=1))
    two_days = succeeded_at(start_of_day(2) + timedelta(hours=23))
    # Finished more than SUCCEEDED_RETENTION (a day) ago, in a table that is not wholly.
    yesterday = succeeded_at(start_of_day(1))
    dead_old, dead_recent = tasks.noop.enqueue(), tasks.noop.enqueue()
    for job, age in ((dead_old, 31), (dead_recent, 29)):
        assert leases.fail(claim_one(), ErrorInfo("BOOM", "boom"))
        Job.objects.filter(pk=job.id).update(finished_at=timezone.now() - timedelta(days=age))
    assert (
        moved_while_young(
            settings, DEAD_RETENTION=timedelta(days=30), WHOLE_TABLE_RETENTION=whole_tables
        )
        == 5
    )
    expired = {succeeded_table(start_of_day(3)), succeeded_table(start_of_day(2))}
    assert expired <= history_tables()

    # Exact retention deletes yesterday's job alone; whole tables keep it with its table.
    assert reaper.purge() == (3 if whole_tables else 4)

    assert not expired & history_tables()
    assert {succeeded_table(start_of_day(1)), "dbqueue_job_ended"} <= history_tables()
    kept = {dead_recent.id} | ({yesterday.id} if whole_tables else set())
    assert set(Job.objects.values_list("pk", flat=True)) == kept
    assert not Job.objects.filter(pk__in=[three_days.id, two_days.id]).exists()


@pytest.mark.postgresql
def test_a_succeeded_job_already_past_retention_stays_for_the_purge_while_a_dead_one_moves() -> (
    None
):
    succeeded = succeeded_at(timezone.now() - timedelta(days=2))
    dead = tasks.noop.enqueue()
    assert leases.fail(claim_one(), ErrorInfo("BOOM", "boom"))
    Job.objects.filter(pk=dead.id).update(finished_at=timezone.now() - timedelta(days=2))

    assert moved() == 1

    assert (table_of(succeeded.id), table_of(dead.id)) == ("dbqueue_job", "dbqueue_job_ended")
    assert reaper.purge() == 1
    assert not Job.objects.filter(pk=succeeded.id).exists()


@pytest.mark.postgresql
def test_a_history_table_holding_a_job_a_dependent_needs_is_kept_and_the_rest_deleted(
    settings: Settings,
) -> None:
    needed = succeeded_at(start_of_day(3))
    other = succeeded_at(start_of_day(3) + timedelta(hours=2))
    dependent = tasks.echo.using(after=[needed]).enqueue("y")
    assert moved_while_young(settings) == 2

    assert reaper.purge() == 1

    assert succeeded_table(start_of_day(3)) in history_tables()
    assert not Job.objects.filter(pk=other.id).exists()
    assert dependencies.results(dependent.id) == ["x"]


@pytest.mark.postgresql
def test_a_drop_a_reader_holds_back_waits_a_second_then_the_rows_go_in_batches(
    settings: Settings,
) -> None:
    job = succeeded_at(start_of_day(3))
    assert moved_while_young(settings) == 1
    table = succeeded_table(start_of_day(3))
    with raw_session() as reader:
        reader.execute("SELECT count(*) FROM dbqueue_job")  # a read left open: ACCESS SHARE

        assert reaper.purge() == 1

        assert table in history_tables()
        assert not Job.objects.filter(pk=job.id).exists()
    assert reaper.purge() == 0
    assert table not in history_tables()


SEED_FINISHED = """
INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at, attempts,
    max_attempts, lease_token, lease_seconds, created_at, started_at, finished_at,
    last_worker_id, last_error_code, last_error, errors)
SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{}', 'succeeded', 0, now(), 1, 5, 1, 60,
    now() - make_interval(hours => g %% 72), now(), now() - make_interval(hours => g %% 72),
    'w0', '', '', '[]'
FROM generate_series(1, %s) AS g
"""


#: 3,000 succeeded and 300 dead jobs of the last three days, interleaved by finish time,
#: and 50 dead jobs of ten days ago.
SEED_INTERLEAVED = """
INSERT INTO dbqueue_job (queue, task, args, kwargs, state, priority, run_at, attempts,
    max_attempts, lease_token, lease_seconds, created_at, started_at, finished_at,
    last_worker_id, last_error_code, last_error, errors)
SELECT 'default', 'tests.jobs.tasks.noop', '[]', '{}', s.state, 0, now(), 1, 5, 1, 60,
    s.finished_at, s.finished_at, s.finished_at, 'w0', '', '', '[]'
FROM generate_series(1, 3350) AS g
CROSS JOIN LATERAL (
    SELECT CASE WHEN g > 3300 OR mod(g, 11) = 0 THEN 'dead' ELSE 'succeeded' END AS state,
           CASE WHEN g > 3300 THEN now() - interval '10 days'
                ELSE now() - make_interval(mins => g) END AS finished_at
) AS s
"""


class IndexReads(NamedTuple):
    """What scans of one index read so far: entries returned, and pages (from cache or not)."""

    entries: int
    pages: int


def index_reads(index: str) -> IndexReads:
    """What scans of ``index`` on dbqueue_job read so far (this session's counts flushed
    first: PostgreSQL 15 and later)."""
    if connection.pg_version < 150000:
        pytest.skip("pg_stat_force_next_flush() came with PostgreSQL 15")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(
            "SELECT s.idx_tup_read, io.idx_blks_read + io.idx_blks_hit"
            " FROM pg_stat_user_indexes s JOIN pg_statio_user_indexes io USING (indexrelid)"
            " WHERE s.indexrelname = %s",
            [index],
        )
        return IndexReads(*map(int, cursor.fetchone()))


def dead_index_entries() -> int:
    """The entries scans of the dead jobs' indexes returned so far, both added up."""
    return sum(
        index_reads(index).entries for index in ("dbqueue_job_dead", "dbqueue_job_dead_kinds")
    )


@pytest.mark.postgresql
def test_a_large_move_reads_the_dead_jobs_index_once_a_sweep_not_once_a_batch(
    settings: Settings,
) -> None:
    """Dead jobs older than the retention are looked for once the newer finished jobs have
    moved, in the sweep's last batch: not in each of its batches, which stepped over every
    dead job still waiting its turn each time. Through either index of the dead jobs: the
    planner may take ``dbqueue_job_dead_kinds`` (migration 0024), of the same size."""
    settings.DBQUEUE = {"SUCCEEDED_RETENTION": timedelta(days=7)}
    with connection.cursor() as cursor:
        cursor.execute(SEED_INTERLEAVED)
    dead_jobs = Job.objects.filter(state=JobState.DEAD).count()
    assert dead_jobs == 350
    before = dead_index_entries()

    batches = list(history.batches(connection, 100, keep_from=history.kept_from(connection)))
    reads = dead_index_entries() - before

    assert sum(batches) == 3_350
    assert len(batches) == 34
    assert table_of(Job.objects.filter(state=JobState.DEAD).earliest("finished_at").id) == (
        "dbqueue_job_ended"
    )
    # One pass over the index in the last batch: its 350 entries (the moved jobs' ones stay
    # until a vacuum, which may take them first), where a pass in each batch read 5,485.
    old_dead = 50
    assert old_dead <= reads <= dead_jobs


@pytest.mark.postgresql
def test_each_batch_of_a_move_reads_on_from_where_the_last_one_stopped(settings: Settings) -> None:
    """A batch starts at the latest finish time the one before reached: it never walks
    again over the index entries of the jobs moved before it, which stay until a vacuum."""
    settings.DBQUEUE = {"SUCCEEDED_RETENTION": None}
    with connection.cursor() as cursor:
        cursor.execute(
            SEED_FINISHED.replace("make_interval(hours => g %% 72)", "make_interval(secs => g)"),
            [30_000],
        )
    before = index_reads("dbqueue_job_finished").pages

    batches = list(history.batches(connection, 100, keep_from=None))
    pages = index_reads("dbqueue_job_finished").pages - before

    assert sum(batches) == 30_000
    assert len(batches) == 301
    # A descent and a leaf or two a batch (784 pages in all); walking from the first entry
    # each time read 22,636.
    assert pages < 10 * len(batches)


@pytest.mark.postgresql
def test_the_move_command_moves_every_finished_job_with_progress(settings: Settings) -> None:
    settings.DBQUEUE = {"SUCCEEDED_RETENTION": timedelta(days=7)}
    with connection.cursor() as cursor:
        cursor.execute(SEED_FINISHED, [2_500])
    ready = tasks.noop.enqueue()
    out = StringIO()

    vacuumed_before = last_vacuums()
    call_command("dbqueue_move_history", "--batch-size", "1000", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0] == "moving 2500 finished job(s) to their history tables"
    assert lines[-2].startswith("done: moved 2500 of 2500 (100%) in ")
    tables = {"dbqueue_job", *history_tables()}
    assert lines[-1].startswith(f"vacuumed and analyzed {len(tables)} table(s) in ")
    vacuumed = last_vacuums()
    assert set(vacuumed) == tables
    assert all(vacuumed[name] > vacuumed_before.get(name, EPOCH) for name in tables)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ONLY dbqueue_job")
        assert cursor.fetchone() == (1,)
    assert Job.objects.count() == 2_501
    assert table_of(ready.id) == "dbqueue_job"
    assert len(history_tables() & {succeeded_table(start_of_day(n)) for n in range(4)}) >= 3


@pytest.mark.postgresql
def test_the_move_command_leaves_the_tables_to_autovacuum_when_asked(settings: Settings) -> None:
    settings.DBQUEUE = {"SUCCEEDED_RETENTION": None}
    with connection.cursor() as cursor:
        cursor.execute(SEED_FINISHED, [10])
    vacuumed_before = last_vacuums()
    out = StringIO()

    call_command("dbqueue_move_history", "--no-vacuum", stdout=out)

    assert out.getvalue().splitlines()[-1].startswith("done: moved 10 of 10 (100%) in ")
    assert Job.objects.count() == 10
    tables = {"dbqueue_job", *history_tables()}
    vacuumed = last_vacuums()
    assert {name: vacuumed.get(name) for name in tables} == {
        name: vacuumed_before.get(name) for name in tables
    }


@pytest.mark.postgresql
def test_the_move_command_inside_a_transaction_moves_and_says_it_did_not_vacuum(
    settings: Settings,
) -> None:
    settings.DBQUEUE = {"SUCCEEDED_RETENTION": None}
    with connection.cursor() as cursor:
        cursor.execute(SEED_FINISHED, [10])
    out = StringIO()

    with transaction.atomic():
        call_command("dbqueue_move_history", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[-2].startswith("done: moved 10 of 10 (100%) in ")
    assert lines[-1] == "not vacuumed: VACUUM cannot run inside the caller's transaction"
    assert Job.objects.count() == 10


#: Before any vacuum a table of the test database has had.
EPOCH = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)


def last_vacuums() -> dict[str, datetime]:
    """When each job table (dbqueue_job and its history tables) was last vacuumed by hand
    (a VACUUM statement, never autovacuum), by name; tables never vacuumed left out."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, last_vacuum FROM pg_stat_user_tables"
            " WHERE last_vacuum IS NOT NULL AND (relid = 'dbqueue_job'::regclass OR relid IN ("
            "    SELECT inhrelid FROM pg_inherits WHERE inhparent = 'dbqueue_job'::regclass))"
        )
        return dict(cursor.fetchall())


@pytest.mark.django_db
def test_the_move_command_says_there_is_nothing_to_move_elsewhere() -> None:
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL moves finished jobs (tests above)")
    out = StringIO()
    call_command("dbqueue_move_history", stdout=out)
    assert (
        out.getvalue()
        == f"nothing to move: on {connection.display_name} every job stays in dbqueue_job\n"
    )
