"""A worker process's connection budget: its own fixed set, plus what task code opens.

The worker's own threads each hold one connection to the queue's database,
whatever ``--concurrency`` says: the claimer (claims, ``next_due``, releases
at shutdown), the completer (every job outcome: successes batched, failures
one by one), the heartbeat, the reaper (unless ``--no-reaper``), the periodic
scheduler (only with schedules) and the listener (one ``LISTEN`` connection
where it listens, ``LISTEN_DATABASE`` when set). Job threads hold one only
while their task code (or a ``job_started``/``job_finished`` receiver) uses
the database, and the reporter only while its receivers do; both give it back
as ``CONN_MAX_AGE`` says (the default 0: when the job returns, when nothing is
left to report). A metrics server opens one per scrape and closes it after;
the listener one for a moment each time it (re)connects, to send its wake-up
probe (``probe``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectionBudget:
    """The connections one worker process holds, by what holds them.

    ``own`` names each worker thread holding a connection of its own, with
    its count, in start-up order. ``listen_database`` says whether the
    ``LISTEN`` connection goes to ``LISTEN_DATABASE`` (it then bypasses a
    pool in front of ``DATABASE``). ``conn_max_age`` is the queue database's
    ``CONN_MAX_AGE`` (``None``: unlimited), which decides whether task
    connections outlive their job.
    """

    own: tuple[tuple[str, int], ...]
    concurrency: int
    conn_max_age: float | None
    listen_database: bool = False
    metrics: bool = False

    @property
    def own_total(self) -> int:
        """Connections the worker holds whatever its jobs do."""
        return sum(count for _, count in self.own)

    @property
    def most(self) -> int:
        """The most it can hold: its own, one per job slot, the reporter's, a metrics scrape's."""
        return self.own_total + self.concurrency + 1 + int(self.metrics)

    def line(self) -> str:
        """The budget in one line, for the start-up log."""
        parts = ", ".join(f"{name} {count}" for name, count in self.own)
        via = " via LISTEN_DATABASE" if self.listen_database else ""
        if self.conn_max_age == 0:
            keeps = "CONN_MAX_AGE=0: given back when the job returns"
        else:
            keeps = (
                f"CONN_MAX_AGE={self.conn_max_age}: kept from job to job, "
                f"so up to {self.concurrency} more"
            )
        metrics = ", + 1 during each metrics scrape" if self.metrics else ""
        return (
            f"connection budget: {self.own_total} own ({parts}{via}) + 1 per job while its "
            f"task code uses the database ({keeps}), + 1 while job_finished receivers do"
            f"{metrics}; at most {self.most}"
        )


def connection_budget(
    concurrency: int,
    *,
    reaper: bool,
    periodic: bool,
    listen: str | None,
    listen_database: str | None,
    conn_max_age: float | None,
    metrics: bool = False,
) -> ConnectionBudget:
    """The budget of a worker run with these options.

    ``listen`` is the alias its ``LISTEN`` connection uses, ``None`` when it
    does not listen (``listener.listen_alias``); ``listen_database`` is
    ``DBQUEUE["LISTEN_DATABASE"]``.
    """
    threads = {
        "claim": 1,
        "complete": 1,
        "heartbeat": 1,
        "reaper": int(reaper),
        "periodic": int(periodic),
        "listen": int(listen is not None),
    }
    return ConnectionBudget(
        own=tuple((name, count) for name, count in threads.items() if count),
        concurrency=concurrency,
        conn_max_age=conn_max_age,
        listen_database=listen is not None and listen == listen_database,
        metrics=metrics,
    )
