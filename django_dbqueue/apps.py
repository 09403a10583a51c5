"""The django_dbqueue app."""

from __future__ import annotations

from django.apps import AppConfig
from django.db import connections
from django.db.backends.signals import connection_created
from django.utils.module_loading import autodiscover_modules


class DbQueueConfig(AppConfig):
    name = "django_dbqueue"
    label = "django_dbqueue"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_dbqueue import (
            checks,  # noqa: F401 - registers the system checks.
            signals,
            testing,
        )
        from django_dbqueue.sql import sqlite_time

        # SQLite's statements add seconds and read the clock to the microsecond with
        # functions of ours: every connection made from now on gets them, and so does
        # any already open.
        connection_created.connect(sqlite_time.install, dispatch_uid="django_dbqueue.sqlite_time")
        for connection in connections.all(initialized_only=True):
            if connection.connection is not None:
                sqlite_time.install(sender=type(connection), connection=connection)

        # Every app's tasks module, in every process (web, shell, worker), so the on_save()
        # hooks and periodic schedules declared there are in place before the first save.
        autodiscover_modules("tasks")
        # Eager mode (DBQUEUE["EAGER"], tests only) runs committed jobs here. The receiver
        # reads the setting on every commit, so override_settings switches it on and off.
        signals.jobs_committed.connect(
            testing.run_committed_jobs, dispatch_uid="django_dbqueue.testing.run_committed_jobs"
        )
