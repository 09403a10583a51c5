"""factory-boy factories: every trait builds a row that passes all constraints."""

from __future__ import annotations

from datetime import timedelta

import factory
from django.utils.timezone import now
from factory.django import DjangoModelFactory

from django_dbqueue.models import Job, JobState


class JobFactory(DjangoModelFactory[Job]):
    class Meta:
        model = Job

    task = "tests.jobs.tasks.noop"
    run_at = factory.LazyFunction(now)
    created_at = factory.LazyFunction(now)

    class Params:
        running = factory.Trait(
            state=JobState.RUNNING,
            worker_id="w1",
            lease_token=1,
            attempts=1,
            started_at=factory.LazyFunction(now),
            lease_until=factory.LazyFunction(lambda: now() + timedelta(minutes=1)),
        )
        succeeded = factory.Trait(
            state=JobState.SUCCEEDED,
            attempts=1,
            lease_token=1,
            finished_at=factory.LazyFunction(now),
        )
        dead = factory.Trait(
            state=JobState.DEAD,
            attempts=5,
            max_attempts=5,
            lease_token=5,
            last_error_code="ValueError",
            finished_at=factory.LazyFunction(now),
        )
        cancelled = factory.Trait(state=JobState.CANCELLED, finished_at=factory.LazyFunction(now))
