"""When a busy worker's free slots are worth a claim: enough of them, or waited for long enough.

A claim costs about the same round trip and planning whether it takes one job
or fifty, so while jobs run the claimer lets free slots gather into a batch:
half the slots (at least one). No free slot waits longer than ``PATIENCE``
(about a claim's own round trip) for the others, though: after that the free
slots are claimed as they are. So a flood of short jobs is claimed in batches,
while a worker whose jobs take a while fills a freed slot within a few
milliseconds instead of leaving it idle until more jobs end. On 1 x 32
threads draining jobs of 50-150 ms (``python -m benchmarks``), slots were busy
93% of the time this way, against 83% when a quarter of them had to be free.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: How long (seconds) a free slot waits for others to free before it is claimed alone.
PATIENCE = 0.002


class ClaimPacing:
    """The claimer's batching rule for a pool of ``size`` slots.

    ``wanted``, ``claimed`` and ``wait`` belong to the claimer's thread;
    ``wakes`` is asked by the pool's threads and reads nothing that changes.
    """

    def __init__(
        self,
        size: int,
        patience: float = PATIENCE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.batch = max(1, size // 2)
        self.patience = patience
        self._clock = clock
        self._free_since: float | None = None

    def wanted(self, free: int, busy: int) -> int:
        """How many of the ``free`` slots to claim now: all of them, or 0 to wait (``wait``).

        All of them when no job runs (``busy`` is 0), when they make a batch,
        or once the first of them has been free for ``patience`` seconds.
        """
        if free <= 0:
            self._free_since = None
            return 0
        if not busy or free >= self.batch:
            return free
        now = self._clock()
        if self._free_since is None:
            self._free_since = now
        return free if now - self._free_since >= self.patience else 0

    def claimed(self, wanted: int, got: int) -> None:
        """A claim for ``wanted`` slots returned ``got`` jobs.

        Slots a short claim left free have been waiting since it: once a
        wake-up brings work, they are claimed without more patience.
        """
        self._free_since = self._clock() if got < wanted else None

    def wait(self, otherwise: float) -> float:
        """How long the claimer waits for a wake-up before it asks ``wanted`` again.

        The rest of the patience while free slots wait for company, else
        ``otherwise`` (the poll interval: a wake-up comes when slots free).
        """
        if self._free_since is None:
            return otherwise
        return max(0.0, self._free_since + self.patience - self._clock())

    def wakes(self, free: int) -> bool:
        """Whether a slot freed to ``free`` free slots wakes the claimer.

        The first free slot (it starts the patience), the one that makes a
        batch, and the last (the pool is idle: shutdown, ``--burst`` and
        ``--max-jobs`` wait for it).
        """
        return free in (1, self.batch, self.size)
