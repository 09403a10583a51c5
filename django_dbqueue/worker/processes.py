"""``runworkers --processes N``: N worker processes under one small supervisor process.

The supervisor forks each child from its own clean state (no threads, no open
database connections), so a child starts as a fresh ``runworkers`` would. It
forwards SIGTERM and SIGINT to every child (children run in their own
process group, so a terminal's Ctrl-C reaches them only through it), then
waits for them to drain and exit. SIGHUP and SIGQUIT are forwarded and drain
the same way; SIGUSR1 is forwarded as it comes (each process logs its status)
and stops nothing (``os_signals``). A child that exits non-zero or dies of a
signal while the supervisor is not stopping is restarted after a jittered,
capped backoff; one that ended ``RESTART_LIMIT`` times in a row without
living ``STABLE_SECONDS`` makes the supervisor give up: it stops the others
and exits non-zero. A child that exits 0 (``--burst`` drained, ``--max-jobs``
reached) is done and not restarted. The exit status is 0 only when every
child's last exit was 0 and none was given up on.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from django.db import connections

from django_dbqueue.retry import Backoff
from django_dbqueue.worker import os_signals

log = logging.getLogger(__name__)

#: Restarts of one child back off from 1 s, doubling, to at most 30 s (equal jitter).
RESTART_BACKOFF = Backoff(base=1, factor=2, cap=30)
#: A child that ends this many times in a row, each time sooner than STABLE_SECONDS, is given up.
RESTART_LIMIT = 5
STABLE_SECONDS = 60.0
#: How often the supervisor looks for exited children and due restarts.
TICK = 0.05
#: prctl(2) option: the signal a Linux process receives when its parent dies.
PR_SET_PDEATHSIG = 1


@dataclass
class Child:
    """One slot of the supervisor: its current process, when it started, its failure streak."""

    index: int
    pid: int | None = None
    started: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    exit_code: int | None = None


def exit_code(status: int) -> int:
    """A ``waitpid`` status as a shell would report it: the code, or 128 + the signal."""
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def drain_when_orphaned(parent: int) -> None:
    """On Linux, have the kernel send this process SIGTERM when the supervisor dies.

    Out of the supervisor's process group, a child would otherwise outlive a
    SIGKILLed supervisor and serve on unwatched; elsewhere it does.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the supervisor died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


class ProcessSupervisor:
    """Runs ``run_child(index)`` in ``count`` forked processes (index 1 to count) until done.

    ``run_child`` runs one worker to its end and returns the child's exit code.
    ``run()`` returns the supervisor's exit code (see the module docstring).
    """

    def __init__(self, count: int, run_child: Callable[[int], int]) -> None:
        self.children = [Child(index) for index in range(1, count + 1)]
        self.run_child = run_child
        self.stopping = False
        self.gave_up = False

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._forward) for sig in os_signals.FORWARDED}
        try:
            for child in self.children:
                self._start(child)
            while any(c.pid is not None or c.restart_at is not None for c in self.children):
                self._reap()
                self._restart_due()
                time.sleep(TICK)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        failed = self.gave_up or any(child.exit_code != 0 for child in self.children)
        return 1 if failed else 0

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        """Pass the signal to every worker process; a ``DRAIN`` one also ends restarts."""
        name = signal.Signals(signum).name
        if signum in os_signals.STATUS:
            log.info("supervisor signal=%s forwarded to the worker processes", name)
        else:
            if not self.stopping:
                log.info("supervisor signal=%s forwarded to the worker processes", name)
            self.stopping = True
            for child in self.children:
                child.restart_at = None
        for child in self.children:
            if child.pid is not None:
                os.kill(child.pid, signum)

    def _start(self, child: Child) -> None:
        connections.close_all()  # a forked child must not share the parent's sockets
        supervisor = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: run one worker, never return into the supervisor
            code = 1
            try:
                for sig in os_signals.DRAIN:
                    signal.signal(sig, signal.SIG_DFL)
                for sig in os_signals.STATUS:  # until its worker runs: not worth dying of
                    signal.signal(sig, signal.SIG_IGN)
                os.setpgrp()
                drain_when_orphaned(supervisor)
                code = self.run_child(child.index)
            except BaseException:  # the child's survival guard: say why it ends, exit 1
                log.exception("supervisor process=%s crashed", child.index)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        child.pid, child.started, child.restart_at = pid, time.monotonic(), None
        log.info("supervisor started process=%s pid=%s", child.index, pid)
        if self.stopping:  # a stop signal came while it was forking: pass it on
            os.kill(pid, signal.SIGTERM)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = next((child for child in self.children if child.pid == pid), None)
            if child is not None:
                self._ended(child, exit_code(status))

    def _ended(self, child: Child, code: int) -> None:
        child.pid, child.exit_code = None, code
        if code == 0 or self.stopping:
            log.info("supervisor process=%s exited code=%s", child.index, code)
            return
        lived = time.monotonic() - child.started
        child.failures = 1 if lived >= STABLE_SECONDS else child.failures + 1
        if child.failures >= RESTART_LIMIT:
            log.error(
                "supervisor process=%s failed %s times in a row (last code=%s): giving up, "
                "stopping the others",
                child.index,
                child.failures,
                code,
            )
            self.gave_up = True
            self._forward(signal.SIGTERM, None)
            return
        delay = RESTART_BACKOFF.delay(child.failures)
        child.restart_at = time.monotonic() + delay
        log.warning(
            "supervisor process=%s exited code=%s: restarting in %.1fs", child.index, code, delay
        )

    def _restart_due(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None and child.restart_at <= now and not self.stopping:
                self._start(child)
