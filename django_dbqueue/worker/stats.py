"""Counters of one worker process, for logs and the metrics endpoint."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields


@dataclass
class WorkerStats:
    """What this process did since it started. Increments are thread-safe.

    ``lost_lease_writes`` counts attempts whose outcome the database refused
    because the lease was gone; ``unrecorded`` counts outcomes that could not
    be written at all (database unreachable until the lease ran out: the
    reaper recovers those jobs); ``renew_failures`` counts leases the
    heartbeat found lost.
    """

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    lost_lease_writes: int = 0
    unrecorded: int = 0
    renew_failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + amount)

    def snapshot(self) -> dict[str, int]:
        """The counters now, as a plain dict."""
        with self._lock:
            return {
                f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")
            }

    @property
    def finished(self) -> int:
        """Attempts this process has brought to an end, whatever their outcome."""
        counts = self.snapshot()
        return sum(
            counts[name]
            for name in ("succeeded", "retried", "dead", "lost_lease_writes", "unrecorded")
        )
