"""How long ``ACCESS EXCLUSIVE`` locks on the job tables are held while something runs.

``AccessExclusiveWatch`` polls ``pg_locks`` from a connection of its own every few
milliseconds and records each span in which one session held ``ACCESS EXCLUSIVE`` on
``dbqueue_job`` or one of its history tables: the lock every read of the table waits
for. A span shorter than the poll interval may go unseen; one seen is measured to
within two intervals.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

import psycopg

#: Seconds between two reads of ``pg_locks``.
POLL = 0.002

HELD = """
SELECT l.pid, c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE l.mode = 'AccessExclusiveLock' AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND c.relname LIKE 'dbqueue\\_job%'
"""


@dataclass
class Span:
    """One session's ``ACCESS EXCLUSIVE`` hold on one table, as seen."""

    relation: str
    first: float
    last: float

    @property
    def seconds(self) -> float:
        return self.last - self.first + POLL


@dataclass
class AccessExclusiveWatch:
    """A context manager: the spans of ``ACCESS EXCLUSIVE`` on the job tables inside it."""

    dsn: str
    spans: list[Span] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> AccessExclusiveWatch:
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _watch(self) -> None:
        open_spans: dict[tuple[int, str], Span] = {}
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                now = time.monotonic()
                seen = {(pid, name) for pid, name in conn.execute(HELD).fetchall()}
                for key in seen:
                    span = open_spans.setdefault(key, Span(key[1], now, now))
                    span.last = now
                for key in set(open_spans) - seen:
                    self.spans.append(open_spans.pop(key))
                time.sleep(POLL)
        self.spans.extend(open_spans.values())

    def longest(self, relation: str | None = None) -> float:
        """The longest span, in seconds, on ``relation`` (``None``: on any job table); 0
        when none was seen."""
        held = [span.seconds for span in self.spans if relation in (None, span.relation)]
        return max(held, default=0.0)
