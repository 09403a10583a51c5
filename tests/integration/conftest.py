"""Fixtures of the ``django.tasks`` backend tests (``test_backend*.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_dbqueue.backend import (
    DatabaseQueueBackend,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)

BACKEND = "django_dbqueue.backend.DatabaseQueueBackend"


@pytest.fixture
def configure(settings: Any) -> Callable[..., DatabaseQueueBackend]:
    """``configure(queues=[...], MAX_ATTEMPTS=1, ...)`` sets ``TASKS`` and returns the backend."""

    def set_tasks(queues: list[str] | None = None, **options: Any) -> DatabaseQueueBackend:
        settings.TASKS = {
            "default": {"BACKEND": BACKEND, "QUEUES": queues or [], "OPTIONS": options}
        }
        found = task_backends["default"]
        assert isinstance(found, DatabaseQueueBackend)
        return found

    return set_tasks


@pytest.fixture
def backend(configure: Callable[..., DatabaseQueueBackend]) -> DatabaseQueueBackend:
    """The default backend, failing jobs dead at once (one attempt)."""
    return configure(MAX_ATTEMPTS=1)


@pytest.fixture
def framework_signals() -> Iterator[list[tuple[str, str, str]]]:
    """``(signal, result id, status)`` for every framework signal sent, in order."""
    seen: list[tuple[str, str, str]] = []
    receivers = []
    for name, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def record(sender: type, task_result: Any, _name: str = name, **_: Any) -> None:
            seen.append((_name, task_result.id, str(task_result.status)))

        signal.connect(record, weak=False)
        receivers.append((signal, record))
    yield seen
    for signal, record in receivers:
        signal.disconnect(record)
