"""What a signal does runs beside the main thread, never inside it (``worker.os_signals``).

A Python signal handler interrupts the main thread between two bytecodes, possibly while
it holds a lock (an ``Event``'s, for the moment ``clear()`` or ``wait()`` takes it) that
what the signal does needs: run there, it would wait on its own thread forever. Each test
holds such a lock on the main thread while the signal arrives, with a deadline on the wait.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from django_dbqueue.worker import os_signals

#: Bound on every wait: the action runs within milliseconds once the lock is free.
DEADLINE = 10.0


@pytest.mark.timeout(30)
@pytest.mark.parametrize("sig", os_signals.DRAIN, ids=lambda sig: sig.name)
def test_a_drain_signal_acts_although_the_main_thread_holds_the_lock_it_needs(
    sig: signal.Signals,
) -> None:
    held = threading.Lock()
    drained: list[signal.Signals] = []
    done = threading.Event()

    def drain(received: signal.Signals) -> None:
        with held:
            drained.append(received)
        done.set()

    with os_signals.handled(drain, status=lambda: None):
        with held:
            os.kill(os.getpid(), sig)  # the handler runs here, on this thread, lock held
            assert not done.wait(0.05)  # the action waits for the lock: it is not on this thread
        assert done.wait(DEADLINE)
    assert drained == [sig]


@pytest.mark.timeout(30)
def test_status_and_drain_signals_act_one_after_another_in_the_order_they_came() -> None:
    seen: list[str] = []
    done = threading.Event()

    def drain(received: signal.Signals) -> None:
        seen.append(received.name)
        if len(seen) == 3:
            done.set()

    def status() -> None:
        seen.append("status")

    with os_signals.handled(drain, status):
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert done.wait(DEADLINE)
    assert seen == ["status", "SIGTERM", "SIGINT"]


def test_the_previous_handlers_come_back_on_exit() -> None:
    before = {sig: signal.getsignal(sig) for sig in os_signals.FORWARDED}
    with os_signals.handled(lambda sig: None, lambda: None):
        assert all(signal.getsignal(sig) is not before[sig] for sig in os_signals.FORWARDED)
    assert {sig: signal.getsignal(sig) for sig in os_signals.FORWARDED} == before


@pytest.mark.timeout(30)
def test_a_signal_whose_action_raises_leaves_the_next_signal_acted_on() -> None:
    drained = threading.Event()

    def status() -> None:
        raise RuntimeError("the status line could not be written")

    with os_signals.handled(lambda sig: drained.set(), status):
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)
        assert drained.wait(DEADLINE)
