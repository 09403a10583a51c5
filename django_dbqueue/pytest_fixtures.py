"""pytest fixtures for projects that test code which enqueues (see ``pytest_plugin``).

- ``dbqueue_jobs``: the jobs enqueued during the test, as a lazy queryset of
  ``Job`` (oldest first), read when the test looks at it;
- ``dbqueue_run``: ``testing.run_jobs``, to run the due jobs in the test's process.

Both need database access and ask pytest-django for ``db``; a test that also
uses ``transactional_db`` gets that instead (pytest-django's rule).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db.models import Max, QuerySet

from django_dbqueue import conf, testing
from django_dbqueue.models import Job


@pytest.fixture
def dbqueue_jobs(db: None) -> QuerySet[Job]:
    """The jobs enqueued from now to the end of the test, by id; rolled-back ones are gone."""
    jobs: QuerySet[Job] = Job.objects.using(conf.get().database)
    before = jobs.aggregate(last=Max("pk"))["last"] or 0
    enqueued: QuerySet[Job] = jobs.filter(pk__gt=before).order_by("pk")
    return enqueued


@pytest.fixture
def dbqueue_run(db: None) -> Callable[..., list[testing.JobRun]]:
    """``run_jobs(queue=None, *, max_jobs=None)``: run the due jobs here, return the attempts."""
    return testing.run_jobs
