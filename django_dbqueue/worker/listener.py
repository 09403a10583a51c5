"""Wake-ups: PostgreSQL ``LISTEN`` on a dedicated connection, and in-process commits.

Both only shorten the wait: the claimer polls every ``poll_interval``
whatever happens here, so a lost notification delays a job by one poll at
most. The ``LISTEN`` connection uses ``LISTEN_DATABASE`` when set. Behind a
transaction-mode pool (``POOLER``) without it, a ``LISTEN`` would hear
nothing, so the worker does not listen, says once that it polls, and relies
on polling and in-process commits. Whenever it listens, it probes its channel
(``worker.probe``) and says once if its wake-ups do not arrive. The ``LISTEN``
session is exempt from ``idle_session_timeout`` (sql ``listen_session``): it is
idle by design.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import connections

from django_dbqueue import conf, signals, sql
from django_dbqueue.worker.connections import Survival
from django_dbqueue.worker.probe import Probe

log = logging.getLogger(__name__)

#: How often the listener checks that it should stop while no notification comes.
LISTEN_TICK = 0.25


def listen_alias() -> str | None:
    """The database alias of the worker's one ``LISTEN`` connection; ``None`` when it has none.

    ``LISTEN_DATABASE`` when set, else the queue's ``DATABASE``; none off
    PostgreSQL (polling only) and none behind a transaction-mode pool
    (``POOLER``) without ``LISTEN_DATABASE``, where a ``LISTEN`` hears nothing.
    """
    cfg = conf.get()
    if connections[cfg.database].vendor != "postgresql":
        return None
    if cfg.pooler is not None and cfg.listen_database is None:
        return None
    return cfg.listen_database or cfg.database


class Listener(threading.Thread):
    """Sets ``wake`` when a job is committed on a queue this worker serves."""

    def __init__(
        self, queues: list[str] | None, wake: threading.Event, stop: threading.Event
    ) -> None:
        super().__init__(name="dbqueue-listener", daemon=True)
        self.queues = set(queues) if queues is not None else None
        self.wake = wake
        self.stop = stop
        #: The alias it LISTENs on, once started (``listen_alias``).
        self.alias = conf.get().database
        self.probe = Probe()

    def serves(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues

    def start(self) -> None:
        """Hear in-process commits at once; start the LISTEN thread where it can hear
        (``listen_alias``)."""
        signals.jobs_committed.connect(self._on_commit, weak=False, dispatch_uid=id(self))
        cfg = conf.get()
        alias = listen_alias()
        if alias is not None:
            self.alias = alias
            super().start()
        elif cfg.pooler is not None:
            log.info(
                "no LISTEN through the %s pool (no LISTEN_DATABASE): polling every %ss",
                cfg.pooler,
                cfg.poll_interval,
            )

    def close(self) -> None:
        signals.jobs_committed.disconnect(dispatch_uid=id(self))
        if self.is_alive():
            self.join(LISTEN_TICK * 2)

    def _on_commit(self, queue: str, **_: Any) -> None:
        if self.serves(queue):
            self.wake.set()

    def run(self) -> None:
        survival = Survival("listen")
        while not self.stop.is_set():
            try:
                self._listen(survival)
            except Exception as exc:  # noqa: BLE001 - the loop's survival guard: logged, backed off.
                self.stop.wait(survival.failed(exc))

    def _listen(self, survival: Survival) -> None:
        """LISTEN until ``stop``; raises ``psycopg.Error`` when the connection fails."""
        import psycopg
        from psycopg import sql as psql

        cfg = conf.get()
        params = connections[self.alias].get_connection_params()
        channel = psql.Identifier(cfg.notify_channel)
        with psycopg.connect(**params, autocommit=True) as listening:
            listening.execute(sql.statements("postgresql")["listen_session"])
            listening.execute(psql.SQL("LISTEN {}").format(channel))
            self.probe.send()
            survival.succeeded()
            self.wake.set()  # Jobs committed while nobody listened: look now.
            while not self.stop.is_set():
                for notify in listening.notifies(timeout=LISTEN_TICK):
                    self.heard(notify.payload)
                self.probe.check()

    def heard(self, payload: str) -> None:
        """A notification on the channel: a wake-up when it names a queue this worker serves."""
        if not self.probe.hears(payload) and self.serves(payload):
            self.wake.set()
