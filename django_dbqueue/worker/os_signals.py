"""What each POSIX signal does to a ``runworkers`` process: the one table, for workers and
the ``--processes`` supervisor alike.

``DRAIN`` signals (SIGTERM, SIGINT, SIGHUP, SIGQUIT) stop claiming and let running jobs
finish for ``--shutdown-timeout`` before what still runs is released; a second SIGINT
releases at once. ``STATUS`` (SIGUSR1) logs one line on what the worker is doing and
changes nothing. A signal not named here keeps Python's default (SIGKILL cannot be caught:
its jobs run again once their leases expire). Names missing on this platform are left out.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger(__name__)


def _available(*names: str) -> tuple[signal.Signals, ...]:
    return tuple(getattr(signal, name) for name in names if hasattr(signal, name))


#: Stop claiming and drain.
DRAIN = _available("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
#: Log a status line and go on.
STATUS = _available("SIGUSR1")
#: What the ``--processes`` supervisor passes on to its worker processes.
FORWARDED = DRAIN + STATUS


@contextmanager
def handled(drain: Callable[[signal.Signals], None], status: Callable[[], None]) -> Iterator[None]:
    """Call ``drain(signal)`` on a ``DRAIN`` signal and ``status()`` on a ``STATUS`` one.

    Both run on one thread of their own (``dbqueue-signals``), one signal
    after another in the order they came. A Python signal handler runs in the
    main thread between any two bytecodes, possibly while that thread holds a
    lock that what the signal does needs (an ``Event``'s, set by ``drain``;
    the logging handler's, for ``status``'s line): the handler itself only
    puts the signal on a ``SimpleQueue``, whose ``put`` is safe in a signal
    handler. Only the main thread may install handlers, so elsewhere (a
    worker run on a thread, in tests) this does nothing. The previous
    handlers come back on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: queue.SimpleQueue[signal.Signals | None] = queue.SimpleQueue()

    def act() -> None:
        while (sig := received.get()) is not None:
            try:
                if sig in STATUS:
                    status()
                else:
                    drain(sig)
            except Exception:  # the next signal must still be acted on (a SIGTERM after it)
                log.exception("acting on %s failed", sig.name)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.put(signal.Signals(signum))

    actor = threading.Thread(target=act, name="dbqueue-signals", daemon=True)
    actor.start()
    previous = {sig: signal.signal(sig, on_signal) for sig in DRAIN + STATUS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        received.put(None)
