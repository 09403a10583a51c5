"""``lookups.among``: the jobs of a list of ids, as ``pk__in`` finds them, on every database;
on PostgreSQL with the list sent as one array parameter, not one placeholder per id."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models import QuerySet
from pytest_django import DjangoAssertNumQueries

from django_dbqueue.lookups import among
from django_dbqueue.models import Job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_among_finds_the_jobs_pk_in_finds() -> None:
    jobs = JobFactory.create_batch(5)
    wanted = [jobs[0].pk, jobs[3].pk, jobs[4].pk, 2**63 - 1]
    found = Job.objects.filter(among(wanted)).order_by("pk")
    assert list(found) == list(Job.objects.filter(pk__in=wanted).order_by("pk"))
    assert [job.pk for job in found] == wanted[:3]
    assert Job.objects.filter(among([jobs[1].pk]), queue=jobs[1].queue).count() == 1


def test_among_no_ids_finds_no_job_and_sends_no_statement(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    JobFactory.create_batch(2)
    with django_assert_num_queries(0):
        assert list(Job.objects.filter(among([]))) == []
        assert Job.objects.filter(among([])).count() == 0


@pytest.mark.postgresql
def test_among_sends_a_thousand_ids_as_one_array_to_postgresql() -> None:
    (job,) = JobFactory.create_batch(1)
    ids = [job.pk, *range(job.pk + 1, job.pk + 1000)]
    statement, params = compiled(Job.objects.filter(among(ids)))
    assert "= ANY(%s)" in statement
    assert params == (ids,)
    assert list(Job.objects.filter(among(ids))) == [job]
    # What it replaces: a placeholder, and a parameter, per id.
    assert len(compiled(Job.objects.filter(pk__in=ids))[1]) == len(ids)


def compiled(jobs: QuerySet[Job]) -> tuple[str, tuple[Any, ...]]:
    """The SQL text of ``jobs``, with its placeholders, and its parameters."""
    statement, params = jobs.query.get_compiler(connection.alias).as_sql()
    return statement, tuple(params)
