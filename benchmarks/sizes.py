"""How much work each benchmark does: the default run and ``--quick``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Job counts and time limits of one run.

    A drain that outlives its deadline is stopped (SIGTERM) and measured over
    the jobs it finished, so a slow worker makes a shorter, flagged result
    instead of an endless run.
    """

    #: Rounds of the enqueue benchmarks; each figure is its best round.
    rounds: int = 5
    enqueue_one: int = 2_000
    enqueue_bulk: int = 10_000
    raw_jobs: int = 20_000
    drain_jobs: int = 20_000
    #: Jobs of each side-by-side drain (``--compare``). Large enough in a quick run too for
    #: the drain's CPU to stand clear of the start-up CPU subtracted from it (start-ups vary
    #: by about 0.1 s of CPU per process, 50 us for each of 2,000 jobs).
    compare_jobs: int = 20_000
    latency_samples: int = 200
    #: Members of the group whose fan-in drain (one callback) is set against a plain drain.
    fan_in_jobs: int = 10_000
    #: Steps of the chain whose hand-offs are timed.
    chain_steps: int = 1_000
    #: Jobs scheduled 1 s ahead, and retries 1 s after their first attempt, one at a time.
    lateness_samples: int = 24
    #: Jobs of 50-150 ms each (a remote call, say) drained by 1 x 32 threads.
    slow_jobs: int = 3_000
    #: Jobs running on another worker while 1 x 32 threads drain ``drain_jobs``.
    running_elsewhere: int = 5_000
    backlog_finished: int = 1_000_000
    backlog_ready: int = 200_000
    rss_jobs: int = 200_000
    #: Finished jobs past retention the reaper purges while a lease expires (``--purge-backlog``).
    purge_backlog_rows: int = 1_000_000
    #: The large-table drains (``--large-table``): ready jobs drained on an emptied table,
    #: then among this many finished rows; and the jobs drained before the table's size is
    #: read.
    large_ready: int = 200_000
    large_finished: int = 10_000_000
    hot_drained: int = 1_000_000
    #: Succeeded jobs past retention that the large-table step purges.
    retention_rows: int = 5_000_000
    large_drain_deadline: float = 600.0
    #: Job table sizes the admin pages are timed at.
    admin_rows: tuple[int, ...] = (1_000_000, 10_000_000)
    drain_deadline: float = 45.0
    long_drain_deadline: float = 100.0


DEFAULT = Sizes()
QUICK = Sizes(
    rounds=1,
    enqueue_one=200,
    enqueue_bulk=1_000,
    raw_jobs=2_000,
    drain_jobs=2_000,
    compare_jobs=10_000,
    latency_samples=20,
    fan_in_jobs=1_000,
    chain_steps=50,
    lateness_samples=3,
    slow_jobs=200,
    running_elsewhere=500,
    backlog_finished=50_000,
    backlog_ready=5_000,
    rss_jobs=5_000,
    purge_backlog_rows=50_000,
    large_ready=2_000,
    large_finished=20_000,
    hot_drained=5_000,
    retention_rows=20_000,
    large_drain_deadline=10.0,
    admin_rows=(20_000,),
    # A bound on a hang, not a timing: on a loaded 2-core machine (CI's second test process
    # beside), four workers starting up through PgBouncer on an empty queue took over 10 s.
    drain_deadline=30.0,
    long_drain_deadline=10.0,
)
