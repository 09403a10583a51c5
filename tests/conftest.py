"""Fixtures shared by every test layer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tests.jobs import tasks


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip what the database behind DATABASE_URL cannot do.

    ``postgresql``: PostgreSQL only (NOTIFY, EXPLAIN plans, catalogs).
    ``mysql``: MySQL/MariaDB only (their EXPLAIN plans).
    ``locking``: row locks with SKIP LOCKED (PostgreSQL, MySQL/MariaDB; not SQLite).
    ``sqlite``: SQLite only (its one-writer locking).
    """
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    needs = {
        "postgresql": "postgresql" in engine,
        "mysql": "mysql" in engine,
        "locking": "postgresql" in engine or "mysql" in engine,
        "sqlite": "sqlite" in engine,
    }
    for marker, available in needs.items():
        if available:
            continue
        skip = pytest.mark.skip(reason=f"needs {marker} (DATABASE_URL points elsewhere)")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _clear_calls() -> Iterator[None]:
    tasks.CALLS.clear()
    yield
    tasks.CALLS.clear()


@pytest.fixture
def vendor() -> str:
    return connection.vendor


@pytest.fixture
def fresh_view_cache() -> Iterator[None]:
    """The metrics view's cache outlives a test: a test using this reads the gauges afresh."""
    from django_dbqueue import metrics  # it reads the models: only once Django is set up

    metrics.VIEW_COLLECTOR.stats.clear()
    yield
    metrics.VIEW_COLLECTOR.stats.clear()
