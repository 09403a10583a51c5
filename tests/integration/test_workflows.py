"""Workflows against a real database: jobs that wait for jobs, released only by a fenced end."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from pytest_django import Settings

from django_dbqueue import chain, group, leases, reaper
from django_dbqueue.dependencies import DEPENDENCY_FAILED, DEPENDENCY_REQUEUED
from django_dbqueue.exceptions import InvalidJob
from django_dbqueue.models import Dependency, Job, JobState
from django_dbqueue.testing import run_jobs
from tests.integration.test_leases import (
    claim_one,
    expire,
    run_in_thread,
    statement_running_elsewhere,
)
from tests.jobs import tasks
from tests.testapp.models import Order
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 30  # seconds any thread may take before the test fails


def states(*jobs: Job) -> list[str]:
    found = dict(Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("pk", "state"))
    return [found[job.pk] for job in jobs]


def test_a_chain_rolled_back_with_its_business_row_leaves_nothing() -> None:
    def order_that_fails() -> None:
        with transaction.atomic():
            Order.objects.create(total=100)
            chain(tasks.echo.step(1), tasks.echo.step(2), tasks.echo.step(3)).enqueue()
            raise RuntimeError("the order failed")

    with pytest.raises(RuntimeError):
        order_that_fails()

    assert not Order.objects.exists()
    assert not Job.objects.exists()
    assert not Dependency.objects.exists()


def test_a_committed_chain_runs_each_step_after_the_one_before_succeeded() -> None:
    with transaction.atomic():
        Order.objects.create(total=100)
        workflow = chain(tasks.echo.step(1), tasks.echo.step(2), tasks.echo.step(3)).enqueue()
    first, second, third = workflow.jobs

    assert states(first, second, third) == ["ready", "waiting", "waiting"]
    assert workflow.last == [third]
    assert [run.job_id for run in run_jobs()] == [first.pk, second.pk, third.pk]
    done = Job.objects.in_bulk([first.pk, second.pk, third.pk])
    assert done[first.pk].finished_at <= done[second.pk].started_at
    assert done[second.pk].finished_at <= done[third.pk].started_at
    assert {job.state for job in done.values()} == {JobState.SUCCEEDED}
    assert {edge.state for edge in Dependency.objects.all()} == {"resolved"}


def test_a_group_callback_runs_once_after_every_member_and_reads_their_results() -> None:
    members = group(tasks.echo.step(i) for i in range(1000))
    with CaptureQueriesContext(connection) as queries:
        workflow = members.then(tasks.collect.step()).enqueue()
    (callback,) = workflow.last

    # One INSERT for the 1,000 members, then the callback: never one statement per member.
    assert len(queries) < 20
    assert Job.objects.get(pk=callback.pk).pending_dependencies == 1000
    runs = run_jobs()
    assert len(runs) == 1001
    assert runs[-1].job_id == callback.pk
    assert [run.job_id for run in runs].count(callback.pk) == 1
    assert Job.objects.get(pk=callback.pk).result == list(range(1000))


def test_a_stale_workers_success_releases_nothing_the_current_owners_does() -> None:
    first = tasks.echo.enqueue("a")
    then = tasks.echo.using(after=[first]).enqueue("b")
    stale = claim_one("w1")
    expire(first.pk)
    leases.reap(backoff_for=lambda *_: tasks.noop.backoff)
    leases.run_now([first.pk])
    current = claim_one("w2")

    assert not leases.complete(stale, "stale")
    assert states(then) == ["waiting"]
    assert Dependency.objects.get(job=then).state == "pending"

    assert leases.complete(current, "current")
    assert states(then) == ["ready"]
    assert Job.objects.get(pk=then.pk).pending_dependencies == 0


def test_a_completion_with_no_dependent_is_one_statement() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the single-statement completion is PostgreSQL's")
    tasks.noop.enqueue()
    lease = claim_one()

    with CaptureQueriesContext(connection) as queries:
        assert leases.complete(lease, None)

    assert len(queries) == 1


def test_a_failed_dependency_cancels_down_four_levels_and_a_requeue_resumes_them() -> None:
    root = tasks.permanent.enqueue()
    level = [root]
    for _ in range(3):
        level = [tasks.echo.using(after=level).enqueue(len(level))]
    finally_step = tasks.echo.using(after=[root], on_dependency_failure="run").enqueue("finally")

    def below() -> list[Job]:
        return list(Job.objects.exclude(pk__in=[root.pk, finally_step.pk]).order_by("pk"))

    run_jobs()

    assert states(root, finally_step) == ["dead", "succeeded"]
    assert {job.state for job in below()} == {JobState.CANCELLED}
    assert {job.last_error_code for job in below()} == {DEPENDENCY_FAILED}
    assert f"job {root.pk}, which it depends on, ended dead" in below()[0].last_error
    assert f"job {below()[0].pk}, which it depends on, ended cancelled" in below()[1].last_error

    requeued = leases.requeue_report([root.pk], 1, "test")
    assert requeued.waiting_again == [job.pk for job in below()]
    assert {job.state for job in below()} == {JobState.WAITING}
    assert {job.errors[-1]["code"] for job in below()} == {DEPENDENCY_REQUEUED}
    assert all(job.finished_at is None for job in below())

    Job.objects.filter(pk=root.pk).update(task=tasks.noop.name)
    runs = run_jobs()
    assert [run.job_id for run in runs] == [root.pk] + [job.pk for job in below()]
    assert {job.state for job in below()} == {JobState.SUCCEEDED}
    assert states(finally_step) == ["succeeded"]  # it ran once, after the first failure


def test_a_finally_step_runs_after_a_dead_dependency_and_reads_none_for_it() -> None:
    dead = tasks.permanent.enqueue()
    fine = tasks.echo.enqueue("fine")
    after_both = tasks.collect.using(after=[dead, fine], on_dependency_failure="run").enqueue()

    run_jobs()

    assert states(dead, fine, after_both) == ["dead", "succeeded", "succeeded"]
    assert Job.objects.get(pk=after_both.pk).result == [None, "fine"]


def test_a_dependency_that_ended_before_the_enqueue_counts_at_once() -> None:
    succeeded = tasks.echo.enqueue("done")
    dead = tasks.permanent.enqueue()
    run_jobs()

    ready = tasks.collect.using(after=[succeeded]).enqueue()
    cancelled = tasks.noop.using(after=[succeeded, dead]).enqueue()
    runs_anyway = tasks.noop.using(after=[dead], on_dependency_failure="run").enqueue()

    assert states(ready, cancelled, runs_anyway) == ["ready", "cancelled", "ready"]
    assert Job.objects.get(pk=cancelled.pk).last_error_code == DEPENDENCY_FAILED
    run_jobs()
    assert Job.objects.get(pk=ready.pk).result == ["done"]


def test_cancelling_a_waiting_job_cancels_what_waits_for_it() -> None:
    first = tasks.echo.using(delay=3600).enqueue(1)
    middle = tasks.echo.using(after=[first]).enqueue(2)
    last = tasks.echo.using(after=[middle]).enqueue(3)

    assert leases.cancel([middle.pk]) == [middle.pk]

    assert states(first, middle, last) == ["ready", "cancelled", "cancelled"]
    assert Job.objects.get(pk=last.pk).last_error_code == DEPENDENCY_FAILED


def test_a_step_deduplicated_into_an_existing_job_makes_the_next_wait_for_that_job() -> None:
    existing = tasks.echo.using(dedupe_key="report").enqueue("existing")

    workflow = chain(
        tasks.echo.using(dedupe_key="report").step("new"), tasks.collect.step()
    ).enqueue()

    deduplicated, then = workflow.jobs
    assert deduplicated.pk == existing.pk
    assert deduplicated.deduplicated
    assert Dependency.objects.get(job=then).depends_on_id == existing.pk
    run_jobs()
    assert Job.objects.get(pk=then.pk).result == ["existing"]


def test_a_waiting_job_holds_its_dedupe_key() -> None:
    first = tasks.echo.enqueue(1)
    waiting = tasks.echo.using(after=[first], dedupe_key="k").enqueue(2)

    again = tasks.echo.using(dedupe_key="k").enqueue(3)

    assert again.pk == waiting.pk
    assert again.deduplicated


def test_retention_keeps_a_result_until_its_dependent_has_read_it(settings: Settings) -> None:
    settings.DBQUEUE = {"SUCCEEDED_RETENTION": timedelta(0)}
    first = tasks.echo.enqueue("kept")
    then = tasks.collect.using(after=[first]).enqueue()
    (lease,) = leases.claim_jobs([first.pk], "w1")
    assert leases.complete(lease, "kept")

    assert reaper.purge() == 0
    assert Job.objects.filter(pk=first.pk).exists()

    run_jobs()
    assert Job.objects.get(pk=then.pk).result == ["kept"]
    assert reaper.purge() == 2
    assert not Dependency.objects.exists()


@pytest.mark.parametrize(
    ("after", "policy", "message"),
    [
        ("17", None, "after must be a list of jobs or job ids"),
        ([0], None, "is not a saved job or a job id"),
        ([True], None, "is not a saved job or a job id"),
        ([10**12], None, "no job with id 1000000000000"),
        (None, "run", "on_dependency_failure needs after"),
        ([], "run", "on_dependency_failure needs after"),
        (None, "maybe", "on_dependency_failure must be one of cancel, run"),
    ],
)
def test_bad_dependencies_raise_invalid_job_and_write_nothing(
    after: object, policy: str | None, message: str
) -> None:
    existing = tasks.noop.enqueue()

    with pytest.raises(InvalidJob, match=message):
        tasks.noop.using(after=after, on_dependency_failure=policy).enqueue()  # type: ignore[arg-type]
    assert list(Job.objects.values_list("pk", flat=True)) == [existing.pk]
    assert not Dependency.objects.exists()


@pytest.mark.locking
def test_a_completion_never_settles_past_an_edge_being_enqueued() -> None:
    """The enqueue's share lock on the dependency makes the completion wait for the edge."""
    first = tasks.echo.enqueue(1)
    lease = claim_one()
    inserted, release = threading.Event(), threading.Event()

    def enqueue_dependent() -> None:
        with transaction.atomic():
            tasks.echo.using(after=[first]).enqueue(2)
            inserted.set()
            assert release.wait(WAIT)

    thread = run_in_thread(enqueue_dependent)
    assert inserted.wait(WAIT)
    completion = leases.complete_many([(lease, leases.encode_result(lease, 1))])
    assert completion.skipped == {first.pk}  # the row is share-locked: tried again later
    release.set()
    thread.join(WAIT)

    assert leases.complete(lease, 1)
    (dependent,) = Job.objects.exclude(pk=first.pk)
    assert dependent.state == JobState.READY


@pytest.mark.locking
def test_concurrent_completions_of_a_fan_in_release_the_callback_exactly_once() -> None:
    workflow = group(tasks.echo.step(i) for i in range(40)).then(tasks.collect.step()).enqueue()
    (callback,) = workflow.last
    claimed = leases.claim(None, "w1", 40)
    halves = [claimed[0::2], claimed[1::2]]
    start = threading.Barrier(2)

    def complete(half: list[leases.Lease]) -> None:
        start.wait(WAIT)
        for lease in half:
            assert leases.complete(lease, lease.job_id)

    threads = [run_in_thread(complete, half) for half in halves]
    for thread in threads:
        thread.join(WAIT)

    job = Job.objects.get(pk=callback.pk)
    assert (job.state, job.pending_dependencies) == (JobState.READY, 0)
    assert Dependency.objects.filter(job=callback, state="resolved").count() == 40


def test_eager_mode_runs_a_whole_chain_at_commit(settings: Settings) -> None:
    settings.DBQUEUE = {"EAGER": True}

    workflow = chain(tasks.echo.step("a"), tasks.echo.step("b"), tasks.collect.step()).enqueue()

    assert states(*workflow.jobs) == ["succeeded", "succeeded", "succeeded"]
    assert Job.objects.get(pk=workflow.jobs[-1].pk).result == ["b"]


@pytest.mark.postgresql
def test_the_completions_edge_check_sees_an_edge_committed_after_the_statement_began() -> None:
    """``dbqueue_awaited_among`` (and ``dbqueue_awaited``, which a worker of the previous release
    calls) reads with a snapshot of its own (what ``complete`` relies on to see an edge
    committed between its start and its row lock); a subquery would not."""
    first, other = tasks.echo.enqueue(1), tasks.echo.enqueue(3)

    def add_edge() -> None:
        wait_until(
            lambda: statement_running_elsewhere("MATERIALIZED (SELECT pg_sleep(1))"),
            WAIT,
            "the statement to be under way",
        )
        tasks.echo.using(after=[first]).enqueue(2)  # commits at once (autocommit)

    thread = run_in_thread(add_edge)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH later AS MATERIALIZED (SELECT pg_sleep(1))
            SELECT dbqueue_awaited_among(ARRAY[%s, %s]::bigint[]), dbqueue_awaited(%s),
                   EXISTS (SELECT 1 FROM dbqueue_dependency WHERE depends_on_id = %s)
            FROM later
            """,
            [first.pk, other.pk, first.pk, first.pk],
        )
        among, awaited, seen_by_subquery = cursor.fetchone()
    thread.join(WAIT)

    assert Dependency.objects.filter(depends_on=first).exists()
    assert (among, awaited, seen_by_subquery) == ([first.pk], True, False)
