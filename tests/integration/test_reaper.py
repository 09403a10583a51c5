"""Retention: only finished jobs past their age are deleted, in batches."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db.models.signals import pre_delete
from django.utils import timezone
from pytest_django import Settings

from django_dbqueue import reaper
from django_dbqueue.models import Job, JobState
from tests.factories import JobFactory
from tests.integration.test_leases import finishes_without_waiting, row_locked_elsewhere


def finished_ago(age: timedelta, **traits: bool) -> Job:
    return JobFactory(**traits, finished_at=timezone.now() - age)  # type: ignore[no-any-return]


@pytest.mark.django_db
class TestPurge:
    def test_succeeded_jobs_go_after_their_retention_and_dead_ones_stay_by_default(self) -> None:
        old = finished_ago(timedelta(days=2), succeeded=True)
        recent = finished_ago(timedelta(hours=1), succeeded=True)
        old_dead = finished_ago(timedelta(days=400), dead=True)
        old_cancelled = finished_ago(timedelta(days=400), cancelled=True)
        assert reaper.purge() == 1
        assert set(Job.objects.values_list("pk", flat=True)) == {
            recent.pk,
            old_dead.pk,
            old_cancelled.pk,
        }
        assert not Job.objects.filter(pk=old.pk).exists()

    def test_dead_and_cancelled_jobs_go_after_dead_retention(self, settings: Settings) -> None:
        settings.DBQUEUE = {"DEAD_RETENTION": timedelta(days=30)}
        finished_ago(timedelta(days=31), dead=True)
        finished_ago(timedelta(days=31), cancelled=True)
        kept = finished_ago(timedelta(days=29), dead=True)
        assert reaper.purge() == 2
        assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]

    def test_none_keeps_succeeded_jobs_forever(self, settings: Settings) -> None:
        settings.DBQUEUE = {"SUCCEEDED_RETENTION": None}
        finished_ago(timedelta(days=999), succeeded=True)
        assert reaper.purge() == 0
        assert Job.objects.count() == 1

    def test_zero_retention_deletes_every_finished_job_at_the_next_sweep(
        self, settings: Settings
    ) -> None:
        settings.DBQUEUE = {"SUCCEEDED_RETENTION": timedelta(0), "DEAD_RETENTION": timedelta(0)}
        for traits in ({"succeeded": True}, {"dead": True}, {"cancelled": True}):
            finished_ago(timedelta(milliseconds=1), **traits)
        ready = JobFactory()
        assert reaper.purge() == 3
        assert list(Job.objects.values_list("pk", flat=True)) == [ready.pk]

    def test_ready_and_running_jobs_are_never_deleted(self, settings: Settings) -> None:
        settings.DBQUEUE = {
            "SUCCEEDED_RETENTION": timedelta(seconds=1),
            "DEAD_RETENTION": timedelta(seconds=1),
        }
        JobFactory(created_at=timezone.now() - timedelta(days=9))
        JobFactory(running=True, created_at=timezone.now() - timedelta(days=9))
        assert reaper.purge() == 0
        assert Job.objects.count() == 2

    def test_purge_deletes_everything_due_in_several_batches(self) -> None:
        for _ in range(5):
            finished_ago(timedelta(days=2), succeeded=True)
        assert reaper.purge(batch_size=2) == 5
        assert Job.objects.count() == 0

    def test_purge_with_a_spent_time_budget_deletes_one_batch_and_leaves_the_rest(
        self,
    ) -> None:
        for _ in range(5):
            finished_ago(timedelta(days=2), succeeded=True)
        assert reaper.purge(batch_size=2, time_budget=0) == 2
        assert Job.objects.count() == 3
        assert reaper.purge(batch_size=2, time_budget=60) == 3

    def test_sweep_purges_for_a_share_of_the_reaper_interval_only(self, settings: Settings) -> None:
        settings.DBQUEUE = {"REAPER_INTERVAL": 0.001}
        finished_at = timezone.now() - timedelta(days=2)
        Job.objects.bulk_create(
            JobFactory.build_batch(reaper.PURGE_BATCH + 1, succeeded=True, finished_at=finished_at)
        )
        assert reaper.sweep() == (0, reaper.PURGE_BATCH)
        assert reaper.sweep() == (0, 1)


@contextmanager
def requeued_on_pre_delete() -> Iterator[list[int]]:
    """Connect a ``pre_delete`` receiver that requeues the job being deleted.

    It stands in for an operator's requeue landing between a collect-then-delete's
    SELECT and its DELETE; yields the ids it requeued.
    """
    requeued: list[int] = []

    def requeue_it(sender: type[Job], instance: Job, **kwargs: object) -> None:
        Job.objects.filter(pk=instance.pk).update(state=JobState.READY, finished_at=None)
        requeued.append(instance.pk)

    pre_delete.connect(requeue_it, sender=Job, dispatch_uid="test-requeue-on-delete")
    try:
        yield requeued
    finally:
        pre_delete.disconnect(sender=Job, dispatch_uid="test-requeue-on-delete")


@pytest.mark.django_db
class TestDeleteOnlyTerminalJobs:
    def test_purge_never_deletes_a_job_requeued_after_it_was_selected(self) -> None:
        old = finished_ago(timedelta(days=2), succeeded=True)
        with requeued_on_pre_delete() as requeued:
            purged = reaper.purge()
        ready_now = set(Job.objects.filter(state=JobState.READY).values_list("pk", flat=True))
        assert ready_now == set(requeued)
        assert purged == 1 - len(requeued)
        assert not Job.objects.filter(pk=old.pk, state=JobState.SUCCEEDED).exists()

    def test_delete_finished_never_deletes_a_job_requeued_after_it_was_selected(self) -> None:
        dead = JobFactory(dead=True)
        ready = JobFactory()
        with requeued_on_pre_delete() as requeued:
            deleted = reaper.delete_finished([dead.pk, ready.pk])
        ready_now = set(Job.objects.filter(state=JobState.READY).values_list("pk", flat=True))
        assert ready_now == {ready.pk, *requeued}
        assert deleted == [dead.pk]
        assert not Job.objects.filter(pk=dead.pk, state=JobState.DEAD).exists()

    def test_purge_and_delete_finished_keep_live_jobs(self, settings: Settings) -> None:
        settings.DBQUEUE = {
            "SUCCEEDED_RETENTION": timedelta(seconds=1),
            "DEAD_RETENTION": timedelta(seconds=1),
        }
        live = [JobFactory(), JobFactory(running=True)]
        old = [finished_ago(timedelta(days=2), **{state: True}) for state in ("dead", "cancelled")]
        assert reaper.delete_finished(j.pk for j in [*live, old[0]]) == [old[0].pk]
        assert reaper.purge() == 1
        assert set(Job.objects.values_list("pk", flat=True)) == {j.pk for j in live}


@pytest.mark.locking
@pytest.mark.django_db(transaction=True)
def test_purge_skips_rows_another_transaction_holds() -> None:
    held = finished_ago(timedelta(days=2), succeeded=True)
    finished_ago(timedelta(days=2), succeeded=True)
    with row_locked_elsewhere(held.pk):
        assert finishes_without_waiting(reaper.purge) == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [held.pk]
