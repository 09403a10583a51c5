"""Settings of the ``runworkers`` subprocesses the e2e tests start.

They reach the test database through ``DATABASE_URL`` (set by the fixture) and
take ``DBQUEUE`` overrides from ``DBQUEUE_OVERRIDES`` (JSON), so each test can
shorten leases and intervals. ``LISTEN_DATABASE_URL`` adds a ``listen`` alias.
``DBQUEUE_INJECT_FAULT`` installs a fault into one worker thread
(``tests.e2e.injected_faults``). ``SENTRY_EVENTS_FILE`` initialises Sentry as a
project's settings would, its events written to that file instead of sent
(``tests.sentry_events``); ``DBQUEUE_SPANS_FILE`` installs an OpenTelemetry SDK
writing the worker's spans to that file (``tests.e2e.tracing``). Job logs, and the
task framework's, go to stderr at INFO, unless ``LOGGING_OVERRIDE`` (JSON) gives a
whole ``LOGGING`` of its own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.settings import *  # noqa: F403 - the test settings, adjusted below.
from tests.settings import DATABASES, INSTALLED_APPS, env

DATABASES["default"].pop("TEST", None)
if os.environ.get("LISTEN_DATABASE_URL"):
    # A second way to the same database, for DBQUEUE["LISTEN_DATABASE"] = "listen".
    DATABASES["listen"] = env.db_url("LISTEN_DATABASE_URL")
if os.environ.get("DBQUEUE_INJECT_FAULT"):
    INSTALLED_APPS = [*INSTALLED_APPS, "tests.e2e.injected_faults.InjectedFaults"]
if os.environ.get("DBQUEUE_SPANS_FILE"):
    INSTALLED_APPS = [*INSTALLED_APPS, "tests.e2e.tracing.SpansToFile"]
if os.environ.get("SENTRY_EVENTS_FILE"):
    import sentry_sdk

    from tests.sentry_events import DSN, EventFile, EventSink

    sentry_sdk.init(dsn=DSN, transport=EventSink(EventFile(Path(os.environ["SENTRY_EVENTS_FILE"]))))
DBQUEUE = {
    "LEASE_SECONDS": 30,
    "POLL_INTERVAL": 1,
    "REAPER_INTERVAL": 0.5,
    **json.loads(os.environ.get("DBQUEUE_OVERRIDES", "{}")),
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_dbqueue": {"handlers": ["stderr"], "level": "INFO"},
        # The task framework's own signal receivers: django.tasks (Django 6), the backport.
        "django.tasks": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "django_tasks": {"handlers": ["stderr"], "level": "INFO"},
    },
}
if os.environ.get("LOGGING_OVERRIDE"):
    LOGGING = json.loads(os.environ["LOGGING_OVERRIDE"])
