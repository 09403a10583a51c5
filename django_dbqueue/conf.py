"""The ``DBQUEUE`` settings: typed, defaulted, read once and kept until they change.

Django's ``setting_changed`` (sent by ``override_settings`` and pytest-django's
``settings`` fixture) drops the kept value, so changed settings apply at once.
Validation lives in ``checks.py``; this module only supplies defaults.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_dbqueue.retry import Backoff

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    "QUEUES": None,
    "DEFAULT_QUEUE": "default",
    "MAX_ATTEMPTS": 5,
    "LEASE_SECONDS": 60,
    "RETRY_BASE": 2,
    "RETRY_FACTOR": 2,
    "RETRY_CAP": 3600,
    "RETRY": {},
    "POLL_INTERVAL": 5,
    "REAPER_INTERVAL": 5,
    "SUCCEEDED_RETENTION": timedelta(days=1),
    "DEAD_RETENTION": None,
    "HISTORY_TABLE_DAYS": 1,
    "WHOLE_TABLE_RETENTION": False,
    "NOTIFY_CHANNEL": "dbqueue",
    "OLDEST_READY_WARNING": 300,
    "PREPARED_STATEMENTS": True,
    "WORKER_SYNCHRONOUS_COMMIT": True,
    "EAGER": False,
    "MAX_ARGS_BYTES": 1024 * 1024,
    "MAX_RESULT_BYTES": 1024 * 1024,
    "POOLER": None,
    "LISTEN_DATABASE": None,
    "READ_DATABASE": None,
    "MIDDLEWARE": (),
    "QUEUE_CONCURRENCY": {},
    "QUEUE_RATE": {},
    "KEY_CONCURRENCY": None,
    "KEY_RATE": None,
}

#: The ``POOLER`` values: none (direct, or a session-mode pool), or a transaction-mode pool.
POOLERS = (None, "transaction")


@dataclass(frozen=True)
class QueueSettings:
    """The effective ``DBQUEUE`` settings, defaults filled in."""

    database: str
    queues: list[str] | None
    default_queue: str
    max_attempts: int
    lease_seconds: float
    retry_base: float
    retry_factor: float
    retry_cap: float
    #: ``{"base", "factor", "cap"}`` (each optional) over the three above: the shape a
    #: ``TASKS`` backend's ``OPTIONS["RETRY"]`` takes.
    retry: dict[str, float]
    poll_interval: float
    reaper_interval: float
    succeeded_retention: timedelta | None
    dead_retention: timedelta | None
    #: The days of finishes one history table of succeeded jobs holds (``history``).
    history_table_days: int
    #: Retention of succeeded jobs takes whole history tables, never a job at a time.
    whole_table_retention: bool
    notify_channel: str
    oldest_ready_warning: float
    #: The worker's protocol threads prepare their statements (PostgreSQL, psycopg 3).
    #: Behind a pooler only when the project sets it True (PgBouncer 1.21+ with
    #: ``max_prepared_statements``); the default there is False.
    prepared_statements: bool
    #: False: the worker's claims, completions and renewals commit asynchronously.
    worker_synchronous_commit: bool
    #: Tests only: every job runs in the committing process when its transaction commits.
    eager: bool
    #: The longest a job's arguments may be as JSON text, in bytes (0: unbounded).
    max_args_bytes: int
    #: The longest a job's result may be as JSON text, in bytes (0: unbounded).
    max_result_bytes: int
    #: ``"transaction"``: connections reach PostgreSQL through a transaction-mode pool, so
    #: the worker keeps no session state on them (``worker.session``).
    pooler: str | None
    #: The alias the worker's one ``LISTEN`` connection uses (None: ``database``), one that
    #: reaches PostgreSQL directly or through a session-mode pool.
    listen_database: str | None
    #: The alias operators' reads use (admin list, health view, ``dbqueue_stats``, metrics
    #: gauges), a replica that may lag; None: ``database``. Never the protocol's.
    read_database: str | None
    #: Dotted paths of the factories wrapping every attempt, outermost first (``middleware``).
    middleware: Sequence[str]
    #: Queue name -> the most jobs of that queue running at once, across every worker
    #: (``limits``).
    queue_concurrency: dict[str, int]
    #: Queue name -> the most jobs of that queue starting, as a rate (``"100/m"``).
    queue_rate: dict[str, str]
    #: The most jobs of one ``concurrency_key`` running at once, and its rate, when their
    #: task sets no limit (both None: such a key is refused).
    key_concurrency: int | None
    key_rate: str | None

    @property
    def reads_from(self) -> str:
        """The alias for operators' reads: ``read_database``, else ``database``."""
        return self.read_database or self.database

    @property
    def backoff(self) -> Backoff:
        """The retry policy for jobs whose task does not set its own."""
        flat = Backoff(base=self.retry_base, factor=self.retry_factor, cap=self.retry_cap)
        return replace(flat, **self.retry)


def user_settings() -> dict[str, Any]:
    """The ``DBQUEUE`` dict exactly as the project wrote it (empty when absent)."""
    value = getattr(settings, "DBQUEUE", None)
    return value if isinstance(value, dict) else {}


@functools.cache
def get() -> QueueSettings:
    """The effective settings now. Assumes the system checks passed."""
    user = user_settings()
    merged = {**DEFAULTS, **user}
    if merged["POOLER"] is not None and "PREPARED_STATEMENTS" not in user:
        merged["PREPARED_STATEMENTS"] = False
    return QueueSettings(**{key.lower(): merged[key] for key in DEFAULTS})


@receiver(setting_changed)
def _forget_changed_settings(setting: str, **_: Any) -> None:
    if setting == "DBQUEUE":
        get.cache_clear()
