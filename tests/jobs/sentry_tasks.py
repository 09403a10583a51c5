"""Tasks and middleware of the Sentry integration's tests (``django_dbqueue.contrib.sentry``)."""

from __future__ import annotations

import sentry_sdk

from django_dbqueue import Backoff, task
from django_dbqueue.contrib.sentry import SentryMiddleware
from django_dbqueue.exceptions import JobCancelled

#: A retry due a tenth of a second later: a worker runs all three attempts at once.
QUICK_RETRY = Backoff(base=0.1, factor=1, cap=0.1)


@task(max_attempts=3, retry=QUICK_RETRY)
def always_fails(message: str) -> None:
    raise ValueError(message)


@task(max_attempts=1)
def fails_after_a_breadcrumb(label: str) -> None:
    sentry_sdk.add_breadcrumb(message=label)
    raise ValueError(label)


@task
def captures_a_message(message: str) -> None:
    sentry_sdk.set_tag("set_by_the_task", message)
    sentry_sdk.capture_message(message)


@task
def stops_on_cancel() -> None:
    raise JobCancelled("an operator asked")


class OpsSentry(SentryMiddleware):
    """Admin URLs on the operators' host."""

    admin_base_url = "https://ops.example.com/"
