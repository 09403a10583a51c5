"""A test build of the worker: a fault injected into one of its threads.

``tests.e2e.settings`` installs this app when ``DBQUEUE_INJECT_FAULT`` names
a thread (``heartbeat``); its ``ready()`` makes that thread's loop raise
``InjectedFault``, a ``BaseException`` no survival guard catches, so the
thread dies as it would of a bug nobody foresaw.
"""

from __future__ import annotations

import os

from django.apps import AppConfig


class InjectedFault(BaseException):
    """Ends the thread it is raised in."""


class InjectedFaults(AppConfig):
    name = "tests.e2e"
    label = "injected_faults"

    def ready(self) -> None:
        if os.environ.get("DBQUEUE_INJECT_FAULT") == "heartbeat":
            from django_dbqueue.worker.heartbeat import Heartbeat

            def beat(self: Heartbeat) -> None:
                raise InjectedFault("injected into the heartbeat")

            Heartbeat.beat = beat  # type: ignore[method-assign]  # the injected fault
