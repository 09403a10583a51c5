"""The public names: importable from ``django_dbqueue``, protocol in ``leases``."""

from __future__ import annotations

import importlib

import pytest

import django_dbqueue

PUBLIC_NAMES = {
    "task": "django_dbqueue.tasks",
    "on_save": "django_dbqueue.enqueue",
    "Backoff": "django_dbqueue.retry",
    "Retry": "django_dbqueue.exceptions",
    "PermanentError": "django_dbqueue.exceptions",
    "InvalidJob": "django_dbqueue.exceptions",
    "LeaseLost": "django_dbqueue.exceptions",
    "Job": "django_dbqueue.models",
    "JobState": "django_dbqueue.models",
    "JobContext": "django_dbqueue.context",
    "chain": "django_dbqueue.workflows",
    "group": "django_dbqueue.workflows",
}
PROTOCOL = ("claim", "renew", "complete", "fail", "release", "reap", "requeue", "cancel")


def test_all_lists_exactly_the_documented_names() -> None:
    assert sorted(django_dbqueue.__all__) == sorted(PUBLIC_NAMES)


@pytest.mark.parametrize(("name", "home"), sorted(PUBLIC_NAMES.items()))
def test_public_name_is_importable_from_the_package(name: str, home: str) -> None:
    exported = getattr(django_dbqueue, name)

    assert exported is getattr(importlib.import_module(home), name)


def test_star_import_provides_every_public_name() -> None:
    namespace: dict[str, object] = {}

    exec("from django_dbqueue import *", namespace)

    assert set(PUBLIC_NAMES) <= set(namespace)


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'enqueue_job'"):
        django_dbqueue.enqueue_job  # noqa: B018 - the attribute access is the test.

    assert not hasattr(django_dbqueue, "Lease")


def test_invalid_job_is_a_value_error() -> None:
    assert issubclass(django_dbqueue.InvalidJob, ValueError)


def test_leases_module_has_one_function_per_transition() -> None:
    leases = importlib.import_module("django_dbqueue.leases")

    for name in PROTOCOL:
        assert callable(getattr(leases, name, None)), name
