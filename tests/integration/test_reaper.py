"""Retention: only finished jobs past their age are deleted, in batches."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from pytest_django import Settings

from django_dbqueue import reaper
from django_dbqueue.models import Job
from tests.factories import JobFactory


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
