"""django_dbqueue: a reliable background job queue in your Django database.

Everything public is importable from here. Names are loaded on first use, so
importing the package (as ``INSTALLED_APPS`` does) touches no models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_dbqueue.context import JobContext
    from django_dbqueue.enqueue import on_save
    from django_dbqueue.exceptions import InvalidJob, LeaseLost, PermanentError, Retry
    from django_dbqueue.models import Job, JobState
    from django_dbqueue.retry import Backoff
    from django_dbqueue.tasks import task
    from django_dbqueue.workflows import chain, group

__all__ = [
    "Backoff",
    "InvalidJob",
    "Job",
    "JobContext",
    "JobState",
    "LeaseLost",
    "PermanentError",
    "Retry",
    "chain",
    "group",
    "on_save",
    "task",
]

_HOMES = {
    "Backoff": "django_dbqueue.retry",
    "InvalidJob": "django_dbqueue.exceptions",
    "Job": "django_dbqueue.models",
    "JobContext": "django_dbqueue.context",
    "JobState": "django_dbqueue.models",
    "LeaseLost": "django_dbqueue.exceptions",
    "PermanentError": "django_dbqueue.exceptions",
    "Retry": "django_dbqueue.exceptions",
    "on_save": "django_dbqueue.enqueue",
    "task": "django_dbqueue.tasks",
    "chain": "django_dbqueue.workflows",
    "group": "django_dbqueue.workflows",
}


def __getattr__(name: str) -> Any:
    try:
        home = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module 'django_dbqueue' has no attribute {name!r}") from None
    return getattr(importlib.import_module(home), name)
