"""The ``Job`` row: one background job, its lease and its history.

Every invariant of the lifecycle is also a database constraint, so a bug or a
hand-written UPDATE cannot leave a job in a shape the workers misread.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.db.models.base import ModelState
from django.db.models.functions import Now
from django.db.models.signals import post_init, pre_init

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType
    from typing_extensions import Self


class JobState(models.TextChoices):
    """The lifecycle states, identical in code, database, admin and logs.

    ``waiting``, ``ready`` and ``running`` are unfinished (at most one
    unfinished job per ``(task, dedupe_key)``); ``ready`` and ``running`` are
    active (only they count for a ``serial_key``); the other three are
    terminal, the only states ``finished_at`` is set in and the only ones any
    path ever deletes.
    """

    #: Waiting for the jobs it depends on (``using(after=...)``): never claimed; made
    #: ``ready`` in the transaction that settles its last dependency (``dependencies``).
    WAITING = "waiting"

    #: Waiting to run, with no worker and no lease: claimable once ``run_at`` has passed (a job
    #: with a ``serial_key`` also waits for the earlier active jobs of its key).
    READY = "ready"
    #: Leased to ``worker_id`` until ``lease_until`` (database clock) under ``lease_token``;
    #: only that lease may settle or release it; an expired lease is the reaper's to retry or end.
    RUNNING = "running"
    #: Terminal: the task returned and its JSON result is stored; never runs again.
    SUCCEEDED = "succeeded"
    #: Terminal: a permanent failure or the attempt budget spent; kept with its error
    #: history until an operator requeues it (same id and idempotency key) or
    #: ``DEAD_RETENTION`` deletes it.
    DEAD = "dead"
    #: Terminal: cancelled while ready, or stopped on a cancel request while running;
    #: never runs again.
    CANCELLED = "cancelled"


ACTIVE_STATES = (JobState.READY, JobState.RUNNING)
#: Every state but the terminal ones: what the dedupe key and ``finished_at`` are about.
UNFINISHED_STATES = (JobState.WAITING, *ACTIVE_STATES)
#: The condition of the operators' indexes over every job (``dbqueue_job_queue``,
#: ``dbqueue_job_task``). Every job meets it; a query may use those indexes only when it
#: says so (the planner proves an index's condition from the query's own), so the
#: claim, ``next_due`` and the dedupe lookup keep their partial indexes whatever the
#: statistics say, and only the admin's filters and search and the commands' selectors,
#: which add it, read these.
EVERY_JOB = Q(id__gt=0)
TERMINAL_STATES = (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED)


def idempotency_key(job_id: int) -> str:
    """The idempotency key of job ``job_id``: derived from the id, so stable across
    attempts and operator requeues (which keep the id)."""
    return f"dbqueue-job-{job_id}"


class UtcNow(Now):
    """The database clock as the lease statements read it: ``Now()``, in UTC on MySQL too.

    MySQL's and MariaDB's ``CURRENT_TIMESTAMP`` is in the session's ``time_zone``,
    where Django stores UTC (``USE_TZ``): on a session in another zone it is hours
    off. ``UTC_TIMESTAMP(6)`` is the clock ``sql/mysql.sql`` compares leases with.
    PostgreSQL's ``STATEMENT_TIMESTAMP()`` and SQLite's ``'NOW'`` are UTC instants already.
    """

    def as_mysql(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> _AsSqlType:
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra_context)


class JobQuerySet(models.QuerySet["Job"]):
    """Readable filters on the lifecycle: ``Job.objects.ready().due()``."""

    def ready(self) -> Self:
        return self.filter(state=JobState.READY)

    def due(self) -> Self:
        """Ready jobs whose ``run_at`` has come (by the database clock)."""
        return self.ready().filter(run_at__lte=UtcNow())

    def scheduled(self) -> Self:
        """Ready jobs not yet due."""
        return self.ready().filter(run_at__gt=UtcNow())

    def waiting(self) -> Self:
        """Jobs waiting for their dependencies."""
        return self.filter(state=JobState.WAITING)

    def running(self) -> Self:
        return self.filter(state=JobState.RUNNING)

    def expired(self) -> Self:
        """Running jobs whose lease has run out: the reaper's work."""
        return self.running().filter(lease_until__lt=UtcNow())

    def succeeded(self) -> Self:
        return self.filter(state=JobState.SUCCEEDED)

    def dead(self) -> Self:
        return self.filter(state=JobState.DEAD)

    def cancelled(self) -> Self:
        return self.filter(state=JobState.CANCELLED)

    def active(self) -> Self:
        """Jobs that may run now or are running: ``ready`` or ``running``."""
        return self.filter(state__in=ACTIVE_STATES)

    def unfinished(self) -> Self:
        """Jobs that may still run: ``waiting``, ``ready`` or ``running``."""
        return self.filter(state__in=UNFINISHED_STATES)

    def finished(self) -> Self:
        """Jobs in a terminal state."""
        return self.filter(state__in=TERMINAL_STATES)


class Job(models.Model):
    """A background job. Fields and constraints follow DESIGN.md's contract."""

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=100, default="default")
    task = models.CharField(max_length=255, help_text="Import path of the task function.")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.READY)
    priority = models.IntegerField(default=0, help_text="Higher runs first.")
    run_at = models.DateTimeField(db_default=UtcNow(), help_text="Not before this time.")
    attempts = models.PositiveIntegerField(default=0, help_text="Attempts consumed.")
    max_attempts = models.PositiveIntegerField(default=5)
    lease_token = models.PositiveBigIntegerField(
        default=0, help_text="Fencing token: +1 on every claim, never decreases."
    )
    lease_seconds = models.PositiveIntegerField(default=60)
    # NULL, not "", is what the claim-shape constraint and the dedupe index rely on.
    worker_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    last_worker_id = models.CharField(
        max_length=255, blank=True, default="", db_default="", help_text="Latest attempt's worker."
    )
    lease_until = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When an operator asked the running job to stop (request_cancel); kept after.",
    )
    created_at = models.DateTimeField(db_default=UtcNow())
    started_at = models.DateTimeField(null=True, blank=True, help_text="Latest attempt's start.")
    finished_at = models.DateTimeField(null=True, blank=True)
    dedupe_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    # Jobs sharing a serial key run one at a time, in enqueue (id) order.
    serial_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    # Indexed by dbqueue_job_subject, which it leads: no index of its own to update per write.
    subject_type = models.ForeignKey(
        ContentType,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    subject_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    subject = GenericForeignKey("subject_type", "subject_id")
    result = models.JSONField(null=True, blank=True)
    backend = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    last_error_code = models.CharField(max_length=100, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    errors = models.JSONField(default=list, blank=True)
    #: What enqueue hooks recorded for the workers (a trace context, a request id): never the
    #: task's arguments; at most ``middleware.MAX_META_BYTES`` of JSON. NULL when no hook added any.
    meta = models.JSONField(null=True, blank=True)
    #: The latest ``context.set_progress`` of an attempt: ``{"done", "total", "message",
    #: "attempt", "at"}`` (``at``: database clock, ISO 8601 UTC), written fenced by the
    #: attempt's lease. NULL until a task reports any; see ``current_progress``.
    progress = models.JSONField(null=True, blank=True)
    #: How many of the jobs this one depends on have not settled yet (``dependencies``):
    #: more than 0 exactly while it is ``waiting``, or ``cancelled`` by a failed dependency.
    pending_dependencies = models.PositiveIntegerField(default=0, db_default=0)
    #: The global limit the job counts against (``limits``): ``task:<task>``,
    #: ``queue:<queue>`` or ``key:<concurrency_key>``; NULL for a job under no limit. At
    #: most ``limit_size`` jobs with one ``limit_key`` are ``running`` at once, and they
    #: start at most ``limit_rate`` a second; either may be NULL, not both. (Not
    #: PositiveIntegerField: its CHECK would scan the table as the column is added;
    #: ``dbqueue_job_limit_shape`` holds both above 0.)
    limit_key = models.CharField(max_length=300, null=True, blank=True)  # noqa: DJ001
    limit_size = models.IntegerField(null=True, blank=True)
    limit_rate = models.FloatField(null=True, blank=True)

    objects: ClassVar[JobQuerySet] = JobQuerySet.as_manager()  # type: ignore[assignment]  # django-stubs types as_manager() as a Manager, not the QuerySet its methods return.

    #: Set on the ``Job`` that ``enqueue()`` returns when an active job with the
    #: same ``(task, dedupe_key)`` already existed and was returned instead.
    deduplicated: bool = False

    class Meta:
        db_table = "dbqueue_job"
        ordering = ("-id",)
        constraints = (
            models.CheckConstraint(
                condition=Q(state__in=JobState.values), name="dbqueue_job_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(attempts__lte=models.F("max_attempts")),
                name="dbqueue_job_attempts_within_budget",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gt=0), name="dbqueue_job_max_attempts_positive"
            ),
            # A limited job names its limit and a size or a rate (or both), and has no
            # serial key (which is a limit of its own): the claim takes serial and limited
            # jobs on separate paths.
            models.CheckConstraint(
                condition=Q(
                    limit_key__isnull=True, limit_size__isnull=True, limit_rate__isnull=True
                )
                | (
                    Q(limit_key__isnull=False, serial_key__isnull=True)
                    & (Q(limit_size__isnull=True) | Q(limit_size__gt=0))
                    & (Q(limit_rate__isnull=True) | Q(limit_rate__gt=0))
                    & (Q(limit_size__isnull=False) | Q(limit_rate__isnull=False))
                ),
                name="dbqueue_job_limit_shape",
            ),
            models.CheckConstraint(
                condition=(
                    Q(state=JobState.RUNNING, worker_id__isnull=False, lease_until__isnull=False)
                    | (
                        ~Q(state=JobState.RUNNING)
                        & Q(worker_id__isnull=True, lease_until__isnull=True)
                    )
                ),
                name="dbqueue_job_claim_shape",
            ),
            models.CheckConstraint(
                condition=(
                    Q(state__in=TERMINAL_STATES, finished_at__isnull=False)
                    | Q(state__in=UNFINISHED_STATES, finished_at__isnull=True)
                ),
                name="dbqueue_job_finish_shape",
            ),
            models.CheckConstraint(
                condition=Q(pending_dependencies=0) | ~Q(state__in=ACTIVE_STATES),
                name="dbqueue_job_runs_with_no_pending_dependency",
            ),
            models.CheckConstraint(
                condition=~Q(state=JobState.WAITING) | Q(pending_dependencies__gt=0),
                name="dbqueue_job_waits_for_a_dependency",
            ),
            models.UniqueConstraint(
                fields=("task", "dedupe_key"),
                condition=Q(state__in=UNFINISHED_STATES, dedupe_key__isnull=False),
                name="dbqueue_job_active_dedupe",
            ),
        )
        indexes = (
            models.Index(
                fields=("queue", "-priority", "run_at", "id"),
                condition=Q(state=JobState.READY),
                name="dbqueue_job_ready",
            ),
            # The ready index in two parts for the general claim: keyless candidates are read
            # apart from keyed ready jobs, of which only the first of each serial key may
            # run, and keyed ones apart from keyless jobs, so neither walks past the other.
            models.Index(
                fields=("queue", "-priority", "run_at", "id"),
                condition=Q(state=JobState.READY, serial_key__isnull=True, limit_key__isnull=True),
                name="dbqueue_job_ready_keyless",
            ),
            models.Index(
                fields=("queue", "-priority", "run_at", "id"),
                condition=Q(state=JobState.READY, serial_key__isnull=False),
                name="dbqueue_job_ready_serial",
            ),
            models.Index(
                fields=("lease_until",),
                condition=Q(state=JobState.RUNNING),
                name="dbqueue_job_running_lease",
            ),
            # The jobs under a concurrency limit (``limits``), apart from the others: the
            # ready ones per limit in claim order, and the running ones a claim counts.
            models.Index(
                fields=("limit_key", "-priority", "run_at", "id"),
                include=("queue", "limit_size"),
                condition=Q(state=JobState.READY, limit_key__isnull=False),
                name="dbqueue_job_ready_limited",
            ),
            models.Index(
                fields=("limit_key",),
                condition=Q(state=JobState.RUNNING, limit_key__isnull=False),
                name="dbqueue_job_running_limited",
            ),
            # The waiting jobs, newest first, for the admin's state filter, and per queue for
            # the counts of stats and metrics (index-only): the claim's indexes hold ready
            # jobs only.
            models.Index(
                fields=("id",),
                include=("queue", "task"),
                condition=Q(state=JobState.WAITING),
                name="dbqueue_job_waiting",
            ),
            # Partial, as is dbqueue_job_subject: a row version gets an entry in these only
            # once it has a value, not on every enqueue and claim (every query here asks for
            # a value: a time range, a subject).
            models.Index(
                fields=("finished_at",),
                condition=Q(finished_at__isnull=False),
                name="dbqueue_job_finished",
            ),
            # The admin's dead-letter list, newest first, by index-only scans of the few
            # dead rows.
            models.Index(
                fields=("id",),
                include=("queue", "task", "last_error_code"),
                condition=Q(state=JobState.DEAD),
                name="dbqueue_job_dead",
            ),
            # How many dead jobs share each queue, task and error code (``dead_jobs``: the
            # health summary's counts, the filters' choices), grouped as the index is
            # ordered: no hashing of every dead job's values on each admin page.
            models.Index(
                fields=("queue", "task", "last_error_code"),
                condition=Q(state=JobState.DEAD),
                name="dbqueue_job_dead_kinds",
            ),
            # The newest failed jobs first, for the admin's search in error text (sql
            # error_search_recent): a word found in many errors is answered from the newest
            # few, where the trigram index would fetch every match before sorting.
            models.Index(
                fields=("id",),
                condition=~Q(last_error=""),
                name="dbqueue_job_failed",
            ),
            # The same for cancelled jobs: the state filter's "cancelled" with any other filter.
            models.Index(
                fields=("id",),
                include=("queue", "task"),
                condition=Q(state=JobState.CANCELLED),
                name="dbqueue_job_cancelled",
            ),
            # The admin's error-code filter: only jobs that ever failed have a code.
            models.Index(
                fields=("last_error_code", "id"),
                condition=~Q(last_error_code=""),
                name="dbqueue_job_error_code",
            ),
            models.Index(
                fields=("subject_type", "subject_id"),
                condition=Q(subject_type__isnull=False),
                name="dbqueue_job_subject",
            ),
            # The admin's queue and task filters and the commands' --queue and --task, newest
            # first, in any state: the partial indexes above cover only the rows operators
            # triage, and a queue or task with only succeeded jobs would be read end to end.
            models.Index(fields=("queue", "id"), condition=EVERY_JOB, name="dbqueue_job_queue"),
            models.Index(fields=("task", "id"), condition=EVERY_JOB, name="dbqueue_job_task"),
            # The admin's exact search for a dedupe key; partial, as only some jobs have one.
            # (A subject id is searched through dbqueue_job_subject, per content type.)
            models.Index(
                fields=("dedupe_key",),
                condition=Q(dedupe_key__isnull=False),
                name="dbqueue_job_dedupe_key",
            ),
            models.Index(
                fields=("serial_key", "id"),
                condition=Q(state__in=ACTIVE_STATES, serial_key__isnull=False),
                name="dbqueue_job_serial_active",
            ),
            models.Index(
                fields=("serial_key",),
                condition=Q(state=JobState.RUNNING, serial_key__isnull=False),
                name="dbqueue_job_serial_running",
            ),
        )
        permissions = (("requeue_job", "Can requeue dead jobs"),)

    def __str__(self) -> str:
        return f"job {self.pk} {self.task} ({self.state})"

    @classmethod
    def loaded(cls, alias: str, rows: Iterable[dict[str, Any]]) -> list[Job]:
        """The instances a query on ``alias`` would return for ``rows``, built without one.

        Each row holds every concrete field's value by ``attname``. The result is
        ``from_db``'s, field for field. ``from_db`` runs ``Model.__init__``, whose
        ``setattr`` per field is most of a bulk enqueue's Python time; when no
        ``pre_init``/``post_init`` receiver is connected for ``Job``, nothing can
        tell how an instance was made, so each row becomes its instance's
        ``__dict__`` instead (a field's attribute holds nothing but its value until
        first read). The rows are taken, not copied: pass dicts nothing else holds.
        """
        if pre_init.has_listeners(cls) or post_init.has_listeners(cls):
            columns = [field.attname for field in cls._meta.concrete_fields]
            return [cls.from_db(alias, columns, [row[c] for c in columns]) for row in rows]
        jobs = []
        for row in rows:
            job = cls.__new__(cls)
            state = ModelState()
            state.adding, state.db = False, alias
            row["_state"] = state
            job.__dict__ = row
            jobs.append(job)
        return jobs

    @property
    def last_error_line(self) -> str:
        """The last line of ``last_error``: the exception, where a traceback ends."""
        lines = self.last_error.strip().splitlines()
        return lines[-1] if lines else ""

    @property
    def current_progress(self) -> dict[str, Any] | None:
        """``progress`` if the job's latest attempt reported it, else ``None``.

        A claim leaves ``progress`` as the previous attempt reported it; once a
        newer attempt runs (``attempts`` grew), that report is stale and not
        returned. A finished or retrying job shows how far its last attempt got.
        """
        report = self.progress
        if isinstance(report, dict) and report.get("attempt") == self.attempts:
            return report
        return None

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts and operator requeues: derived from the id."""
        return idempotency_key(self.pk)


class EdgeState(models.TextChoices):
    """Where one dependency stands, for the job that waits on it."""

    #: The dependency has not finished (or was revived by an operator's requeue).
    PENDING = "pending"
    #: Counted: the dependency succeeded, or ended otherwise under ``on_failure="run"``.
    RESOLVED = "resolved"
    #: The dependency ended ``dead`` or ``cancelled`` under ``on_failure="cancel"``, which
    #: cancelled the waiting job: a requeue of the dependency makes it ``pending`` again.
    FAILED = "failed"


class OnFailure(models.TextChoices):
    """What a job does when a job it depends on ends ``dead`` or ``cancelled``."""

    #: Cancelled too, with code ``DEPENDENCY_FAILED`` naming the dependency (the default).
    CANCEL = "cancel"
    #: Runs anyway, once the dependency is finished whatever its outcome: a ``finally`` step.
    RUN = "run"


class Dependency(models.Model):
    """An edge of a workflow: ``job`` waits until ``depends_on`` has settled.

    Written with ``job`` in the same transaction (``enqueue``), settled by the
    transaction that finishes ``depends_on`` (``dependencies.settle``); read
    by the dependent (``context.dependency_results``, in ``position`` order)
    and the admin. No database foreign keys: retention deletes the edges of
    the jobs it deletes itself, in the same statement batch, and never deletes
    a job an unfinished job depends on.
    """

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="dependency_edges",
        help_text="The job that waits.",
    )
    depends_on = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="dependent_edges",
        help_text="The job it waits for.",
    )
    #: The dependency's place in the job's ``after`` list.
    position = models.PositiveIntegerField()
    on_failure = models.CharField(max_length=8, choices=OnFailure.choices)
    state = models.CharField(max_length=8, choices=EdgeState.choices, default=EdgeState.PENDING)

    class Meta:
        db_table = "dbqueue_dependency"
        constraints = (
            models.UniqueConstraint(fields=("job", "position"), name="dbqueue_dependency_job"),
            models.CheckConstraint(
                condition=Q(state__in=EdgeState.values), name="dbqueue_dependency_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(on_failure__in=OnFailure.values),
                name="dbqueue_dependency_on_failure_valid",
            ),
        )
        indexes = (
            # What a finishing job settles, and the admin's list of a job's dependents.
            models.Index(fields=("depends_on", "job"), name="dbqueue_dependency_on"),
            # The jobs held by a failed dependency: dbqueue_jobs_blocked, the summary.
            models.Index(
                fields=("job",),
                condition=Q(state=EdgeState.FAILED),
                name="dbqueue_dependency_failed",
            ),
        )

    def __str__(self) -> str:
        return f"job {self.job_id} after job {self.depends_on_id} ({self.state})"


class PeriodicSlot(models.Model):
    """The latest cron slot enqueued for a periodic task.

    Workers advance ``last_slot`` with a compare-and-set in the same
    transaction as the slot's job, so each slot is enqueued once across all
    workers without a leader, even after the job row is purged. The slot is
    stored as UTC epoch seconds (cron slots are whole seconds), so slots
    compare in time order whatever ``USE_TZ`` and ``TIME_ZONE`` say: naive
    local times would repeat in a DST fall-back hour.
    """

    task = models.CharField(max_length=255, unique=True)
    last_slot = models.BigIntegerField(help_text="The slot's time, UTC epoch seconds.")

    class Meta:
        db_table = "dbqueue_periodic_slot"

    def __str__(self) -> str:
        return f"{self.task} @ {self.slot:%Y-%m-%d %H:%M} UTC"

    @property
    def slot(self) -> datetime:
        """``last_slot`` as an aware UTC datetime."""
        return datetime.fromtimestamp(self.last_slot, dt_timezone.utc)


class QueuePause(models.Model):
    """A paused queue: no worker claims its jobs while the pause is in force.

    Written by ``pauses.pause`` (``dbqueue_pause``, the admin's summary), one
    row per queue, times from the database clock; deleted by ``pauses.resume``,
    or by the reaper once ``until`` has passed. The claim reads it: a claim
    statement that began after the pause committed takes none of the queue's
    jobs. ``until`` ``None``: paused until resumed.
    """

    queue = models.CharField(max_length=100, primary_key=True)
    paused_at = models.DateTimeField()
    until = models.DateTimeField(
        null=True, blank=True, help_text="When the queue resumes by itself; empty: never."
    )
    paused_by = models.CharField(
        max_length=150, blank=True, help_text="Who paused it: a user, or the command."
    )

    class Meta:
        db_table = "dbqueue_queue_pause"

    def __str__(self) -> str:
        return f"{self.queue} paused" + (
            f" until {self.until:%Y-%m-%d %H:%M:%S}" if self.until else ""
        )


class RateBucket(models.Model):
    """The pace of one rate-limited limit (``limits``): when its next start is due.

    ``due_at`` is the GCRA's theoretical arrival time: a start is admitted while
    ``due_at`` is at most ``(burst - 1) / rate`` seconds ahead of the database clock,
    and each start moves it ``1 / rate`` seconds on (from now, if it lay behind). The
    claim writes it, for the jobs it started, under the limit's lock; a row whose
    ``due_at`` has passed says no more than no row, and the reaper deletes it.
    """

    limit_key = models.CharField(max_length=300, primary_key=True)
    due_at = models.DateTimeField()
    #: Starts per second, as the latest claim paced it (for the idle claimer's wake-up).
    rate = models.FloatField()

    class Meta:
        db_table = "dbqueue_rate_bucket"

    def __str__(self) -> str:
        return f"{self.limit_key} paced at {self.rate:g}/s"
