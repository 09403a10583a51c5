"""``search`` without its trigram index, and the system check that says so (``dbqueue.W006``)."""

from __future__ import annotations

import pytest
from django.db import connection

from django_dbqueue import checks, search
from django_dbqueue.models import Job
from tests.factories import JobFactory

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]


@pytest.fixture
def no_trigram_index() -> None:
    """The test database without ``dbqueue_job_error_text`` (the test's rollback restores it)."""
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX dbqueue_job_error_text")


def test_the_check_is_silent_where_migrate_built_the_trigram_index() -> None:
    assert checks.check_error_search(databases=["default"]) == []


def test_without_the_trigram_index_the_check_warns_with_the_statement_to_run(
    no_trigram_index: None,
) -> None:
    (warning,) = checks.check_error_search(databases=["default"])
    assert warning.id == "dbqueue.W006"
    assert "the trigram index dbqueue_job_error_text" in warning.msg
    assert warning.hint is not None
    assert "CREATE INDEX CONCURRENTLY IF NOT EXISTS dbqueue_job_error_text" in warning.hint


def test_without_the_trigram_index_error_text_is_not_searched_but_the_rest_is(
    no_trigram_index: None,
) -> None:
    failed = JobFactory(
        dead=True,
        attempts=1,
        max_attempts=1,
        last_error_code="KeyError",
        last_error="KeyError: card declined",
    )
    jobs = Job.objects.all()
    assert not search.searches_error_text(connection.alias)
    assert list(search.matching(jobs, "declined")) == []
    assert list(search.matching(jobs, "KeyError")) == [failed]
    assert list(search.matching(jobs, str(failed.pk))) == [failed]
