"""The worker runtime behind ``runworkers``: one module per thread or concern.

- ``worker``: the ``Worker`` (one process): starts its threads, runs the claim loop, shuts down.
- ``claimer``: the claim loop's pacing and batching: when free slots are worth a claim, and
  one batched claim's jobs resolved and made live for the slots.
- ``pool``: the job slots (threads ``dbqueue-slot-N``), each running one job at a time.
- ``execute``: one attempt: the task called, its outcome written through an outcome writer
  (``InlineWriter`` here, the ``completer`` in a worker) and reported.
- ``outcome``: ``Outcome``, the counter each outcome adds to, the ``OutcomeWriter`` interface
  and the write-retry policy (``write_retried``: retried while the lease may live, replaced
  when refused for good).
- ``completer``: the worker's outcome writer: successes written in batches, other outcomes one
  by one, on its own connection (thread ``dbqueue-completer``).
- ``reporter``: outcomes counted (the one place) and reported: the log line (INFO while calm,
  DEBUG for successes under load) and ``signals.job_finished`` (thread ``dbqueue-reporter`` for
  the completer's successes).
- ``leftovers``: what task code leaves on its thread (an open transaction, session state, a
  forked child), undone before the outcome is written.
- ``live``: the running attempts, and whether each one's code started.
- ``heartbeat``: every live lease renewed in one statement; ``context.heartbeat()`` served.
- ``listener``: wake-ups: ``LISTEN`` on one connection, and in-process commits.
- ``probe``: does the listener hear its own ``NOTIFY``?
- ``watchdog``: whether the process is whole enough to go on claiming.
- ``processes``: ``runworkers --processes N``: the parent that forks, signals and restarts N
  worker processes.
- ``os_signals``: what each POSIX signal does (drain, status), and what ``processes`` forwards.
- ``counters``: the process's counters and duration histograms.
- ``connections``: connection hygiene, how each loop survives (``Survival``, ``repeat``), one
  write on a thread's own connection (``applied``), an idle-closed connection reconnected.
- ``faults``: which database error means what (the one table every loop consults).
- ``session``: the worker's own connections set up once each.
- ``budget``: the connections a worker process holds.
"""
