"""The wake-up probe: does this worker hear the notifications sent to its channel?

Once its ``LISTEN`` is set up, the listener sends one ``NOTIFY`` on its own
channel through the queue's database, on an ordinary connection of that
alias, the way enqueue notifies. If the notification does not come back
within ``PROBE_WINDOW`` seconds, wake-ups cannot reach this worker (its
``DATABASE`` is in fact a transaction-mode pool such as PgBouncer, where a
``LISTEN`` hears nothing, or ``LISTEN_DATABASE`` reaches another server): it
says so once per process at WARNING, with what to set, and relies on polling,
which never depended on wake-ups. A probe heard is said once at INFO.

The payload is ``probe:<random hex>``. No queue is named so (a queue name has
no ``:``), so every listener, this one included, treats any probe as no
wake-up: a probe never makes a claimer look for jobs, on this worker or on
the others that listen on the channel. Only workers of a version without the
probe would take one for a wake-up: one claim that finds nothing.
"""

from __future__ import annotations

import logging
import time
import uuid

from django.db import connections

from django_dbqueue import conf, sql
from django_dbqueue.worker.connections import close_queue_connection

log = logging.getLogger(__name__)

#: How long the listener waits for its own probe before saying wake-ups do not arrive.
PROBE_WINDOW = 3.0
#: What every probe's payload starts with (never a queue name).
PROBE_PREFIX = "probe:"


class Probe:
    """One listener's probe: sent after each ``LISTEN``; each verdict logged once per process."""

    def __init__(self) -> None:
        self.payload = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        self.sent_at: float | None = None
        #: The verdicts already logged: True (heard), False (not heard in the window).
        self.told: set[bool] = set()

    def send(self) -> None:
        """``NOTIFY`` the channel through the queue's database and start the window.

        Raises the database's error if it cannot be sent (the listener's loop
        survives it and probes again once it listens again). The connection it
        used is closed either way: the listener holds only its ``LISTEN`` one.
        """
        cfg = conf.get()
        try:
            sql.run_alone(
                connections[cfg.database],
                "notify_probe",
                {"channel": cfg.notify_channel, "payload": self.payload},
            )
        finally:
            close_queue_connection()
        self.sent_at = time.monotonic()

    def hears(self, payload: str) -> bool:
        """Whether ``payload`` is a probe (this one or another worker's): never a wake-up."""
        if payload == self.payload and self.sent_at is not None:
            waited, self.sent_at = time.monotonic() - self.sent_at, None
            self._tell(heard=True, waited=waited)
        return payload.startswith(PROBE_PREFIX)

    def check(self) -> None:
        """Say that wake-ups do not arrive if the window passed with the probe unheard."""
        if self.sent_at is not None and time.monotonic() - self.sent_at >= PROBE_WINDOW:
            self.sent_at = None
            self._tell(heard=False, waited=PROBE_WINDOW)

    def _tell(self, *, heard: bool, waited: float) -> None:
        if heard in self.told:
            return
        self.told.add(heard)
        cfg = conf.get()
        if heard:
            log.info(
                "wake-ups arrive: this worker's probe on channel %r was heard in %.0f ms",
                cfg.notify_channel,
                waited * 1000,
            )
            return
        hint = (
            "LISTEN_DATABASE must reach the queue's database directly or through a "
            "session-mode pool"
            if cfg.listen_database is not None
            else "if DATABASE goes through a transaction-mode pool (PgBouncer), set "
            "POOLER = 'transaction' and LISTEN_DATABASE to an alias that reaches PostgreSQL "
            "directly"
        )
        log.warning(
            "wake-ups do not arrive: this worker's probe on channel %r was not heard within "
            "%ss, so it picks jobs up by polling every %ss; %s",
            cfg.notify_channel,
            waited,
            cfg.poll_interval,
            hint,
        )
