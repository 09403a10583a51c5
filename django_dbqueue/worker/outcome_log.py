"""The per-job log line: INFO while the worker is calm, DEBUG for successes under load.

Every attempt logs one line with its outcome. At thousands of jobs a second
those lines would drown INFO, so once more than ``CALM_RATE`` successes are
logged within one second, success lines go to DEBUG until a whole second
passes below that rate, and INFO gets one summary line every
``SUMMARY_EVERY`` seconds instead. Retries, dead jobs, lost leases and
unwritten outcomes always log at INFO or above.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

#: Successes per second above which their lines go to DEBUG.
CALM_RATE = 20
#: Seconds between the INFO summaries of successes logged at DEBUG.
SUMMARY_EVERY = 10.0

log = logging.getLogger(__name__)

#: One line to log: its message, the message's arguments, and whether it is quiet (a success).
Line = tuple[str, tuple[object, ...], bool]


class OutcomeLog:
    """Chooses each line's level from the recent rate of successes. Thread-safe."""

    def __init__(
        self,
        calm_rate: int = CALM_RATE,
        summary_every: float = SUMMARY_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.calm_rate = calm_rate
        self.summary_every = summary_every
        self._clock = clock
        self._lock = threading.Lock()
        self._second = -1
        self._this_second = 0
        self._busy_until = 0
        self._quieted = 0
        self._summary_due = 0.0

    def write(self, message: str, *args: object, quiet: bool) -> None:
        """Log ``message % args``; a ``quiet`` line (a success) may go to DEBUG under load."""
        self.write_all([(message, args, quiet)])

    def write_all(self, lines: Sequence[Line]) -> None:
        """Log each line in order; the level of the quiet ones is decided once for them all.

        A batch of successes costs one look at the rate, and nothing per
        line when their level is not logged.
        """
        quiet = sum(1 for *_, is_quiet in lines if is_quiet)
        level, summary = self._level(quiet) if quiet else (logging.INFO, 0)
        if summary:
            log.info(
                "%s job successes logged at DEBUG since the last summary (over %s a second)",
                summary,
                self.calm_rate,
            )
        quiet_logged = log.isEnabledFor(level)
        for message, args, is_quiet in lines:
            if not is_quiet:
                log.info(message, *args)
            elif quiet_logged:
                log.log(level, message, *args)

    def _level(self, quiet: int) -> tuple[int, int]:
        """The level of ``quiet`` lines, and how many quieted lines to summarise now (0: none)."""
        now = self._clock()
        with self._lock:
            second = int(now)
            if second != self._second:
                self._second, self._this_second = second, 0
            self._this_second += quiet
            if self._this_second > self.calm_rate:
                self._busy_until = second + 2  # calm again after a whole second below the rate
            if second >= self._busy_until:
                summary, self._quieted = self._quieted, 0
                return logging.INFO, summary
            if not self._quieted:
                self._summary_due = now + self.summary_every
            self._quieted += quiet
            if now < self._summary_due:
                return logging.DEBUG, 0
            summary, self._quieted = self._quieted, 0
            return logging.DEBUG, summary


#: The worker process's outcome log.
outcome_log = OutcomeLog()
