"""Fixtures shared by every test layer."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tests import tasks


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """PostgreSQL-only tests skip when the suite runs on another database."""
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" in engine:
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (DATABASE_URL points elsewhere)")
    for item in items:
        if item.get_closest_marker("postgresql") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _clear_calls() -> Iterator[None]:
    tasks.CALLS.clear()
    yield
    tasks.CALLS.clear()


@pytest.fixture
def vendor() -> str:
    return connection.vendor
