"""Sentry error tracking for jobs (the ``sentry`` extra), turned on by one middleware line::

    DBQUEUE = {"MIDDLEWARE": ["django_dbqueue.contrib.sentry.SentryMiddleware"]}

Import it only where Sentry is wanted: it needs ``sentry-sdk`` 2.x
(``pip install "django-dbqueue[sentry]"``) and raises ``ImproperlyConfigured``
without it. The project initialises Sentry itself (``sentry_sdk.init`` in its
settings, which ``runworkers`` loads); until then nothing is sent.

- Every attempt runs in an isolation scope of its own, tagged with its job
  (``TASK``, ``QUEUE``, ``JOB_ID``, ``ATTEMPT``): what the task captures itself,
  and the breadcrumbs it leaves, carry the job's tags and never leak into the
  next job of the thread.
- A job's failure is reported once, when the job goes ``dead`` (the failure
  that spent its last attempt, a ``PermanentError``, a task that no longer
  imports...), with the tags above plus ``ERROR_CODE`` and ``OUTCOME``, and a
  ``dbqueue`` context holding the job's admin URL. Retries send nothing, so a
  flaky dependency never floods the tracker. ``SentryEveryAttemptMiddleware``
  reports every failed attempt instead (a ``raise Retry`` excepted: it is a
  reschedule, not an error).
- Never reported: successes, cancelled jobs, an attempt whose lease was lost
  (another attempt owns the job), and a job the reaper makes dead after its
  worker died (no exception was raised; the job's history says
  ``LEASE_EXPIRED``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.urls import NoReverseMatch, reverse

from django_dbqueue import signals
from django_dbqueue.context import JobContext
from django_dbqueue.errors import RETRY
from django_dbqueue.leases import Lease
from django_dbqueue.middleware import AttemptCall
from django_dbqueue.models import Job

INSTALL_HINT = (
    'django_dbqueue.contrib.sentry needs sentry-sdk: pip install "django-dbqueue[sentry]".'
)

try:
    import sentry_sdk
    from sentry_sdk.scope import Scope, use_isolation_scope
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImproperlyConfigured(INSTALL_HINT) from exc

if TYPE_CHECKING:
    from sentry_sdk._types import Event, Hint

#: The tags every event of an attempt carries: the task's import path, the queue, the job's
#: id and the attempt's number (1-based).
TASK = "dbqueue.task"
QUEUE = "dbqueue.queue"
JOB_ID = "dbqueue.job_id"
ATTEMPT = "dbqueue.attempt"
#: The tags a reported failure adds: the code it was recorded with (``Job.last_error_code``)
#: and the attempt's outcome (``dead``, or ``retried`` when every attempt is reported).
ERROR_CODE = "dbqueue.error_code"
OUTCOME = "dbqueue.outcome"
#: The name of the event context holding the job's admin URL, attempts and worker.
CONTEXT = "dbqueue"


#: The ``dispatch_uid`` of the ``job_finished`` receiver.
RECEIVER = "django_dbqueue.contrib.sentry"


@receiver(setting_changed)
def _disconnect_on_changed_settings(setting: str, **_: Any) -> None:
    # The stack is rebuilt from the new settings (middleware.stack), with or without Sentry.
    if setting == "DBQUEUE":
        signals.job_finished.disconnect(sender=Job, dispatch_uid=RECEIVER)


class _LastFailure(threading.local):
    """The isolation scope of the last attempt that raised through the middleware on this
    thread, kept until its outcome is reported (on the same thread, right after)."""

    lease: Lease | None = None
    scope: Scope | None = None


_last_failure = _LastFailure()


class SentryMiddleware:
    """Run each attempt in its own Sentry scope; report a job's failure when it goes ``dead``.

    List it first in ``DBQUEUE["MIDDLEWARE"]``, so its scope also covers the
    other middleware. A subclass chooses what is reported and how the admin
    URL reads (the class attributes below): the choice travels with the one
    line that turns the integration on, and needs no setting of its own.

    Built once per worker process (``middleware.stack``), it connects its
    receiver to ``signals.job_finished`` then, in place of any connected
    before (one reporter per process), and disconnects it when ``DBQUEUE``
    changes. It reports from that receiver because only the outcome's write
    knows whether a failure ended the job: inside the handler of the
    exception, on the job's thread, in the attempt's scope, so the event has
    the attempt's breadcrumbs. A job that ended before any middleware ran
    (``TASK_NOT_FOUND``, ``BAD_ARGUMENTS``) is reported in a new scope with
    the same tags.
    """

    #: Report every failed attempt (outcome ``retried`` or ``dead``), not only a dead job's last.
    report_every_attempt: ClassVar[bool] = False
    #: Put before the job's admin path in reports: ``"https://ops.example.com"``. Empty: the
    #: path alone (``/admin/django_dbqueue/job/42/change/``).
    admin_base_url: ClassVar[str] = ""

    def __init__(self, call_next: AttemptCall) -> None:
        self.call_next = call_next
        # A rebuilt stack's middleware replaces the last one's receiver: one report per outcome.
        signals.job_finished.disconnect(sender=Job, dispatch_uid=RECEIVER)
        signals.job_finished.connect(
            self._job_finished, sender=Job, weak=False, dispatch_uid=RECEIVER
        )

    def __call__(self, context: JobContext) -> object:
        with sentry_sdk.isolation_scope() as scope:
            self._describe(scope, context.lease)
            try:
                return self.call_next(context)
            except BaseException:
                _last_failure.lease, _last_failure.scope = context.lease, scope
                raise

    def _reports(self, outcome: str, error_code: str) -> bool:
        """Whether an attempt that ended with ``outcome`` (``job_finished``) is reported."""
        if outcome == "dead":
            return True
        return self.report_every_attempt and outcome == "retried" and error_code != RETRY

    def _job_finished(self, lease: Lease, outcome: str, error_code: str = "", **_: Any) -> None:
        """``signals.job_finished`` receiver: report the failure in ``sys.exc_info()`` if
        ``_reports`` says so, or a message for a dead job that raised nothing."""
        if not self._reports(outcome, error_code):
            return
        with self._scope_of(lease) as scope:
            scope.set_tag(ERROR_CODE, error_code or "-")
            scope.set_tag(OUTCOME, outcome)
            error = sys.exc_info()[1]
            if error is not None:
                sentry_sdk.capture_exception(error)
            else:
                sentry_sdk.capture_message(
                    f"job of {lease.task} is {outcome}: {error_code or 'no error code'}",
                    level="error",
                )

    @contextlib.contextmanager
    def _scope_of(self, lease: Lease) -> Iterator[Scope]:
        """The isolation scope ``lease``'s attempt ran in, made current; a new one with the
        same tags when the attempt raised nothing through this middleware."""
        saved, scope = _last_failure.lease, _last_failure.scope
        _last_failure.lease = _last_failure.scope = None
        if saved is lease and scope is not None:
            with use_isolation_scope(scope):
                yield scope
            return
        with sentry_sdk.isolation_scope() as scope:
            self._describe(scope, lease)
            yield scope

    def _describe(self, scope: Scope, lease: Lease) -> None:
        """Tag ``scope`` with ``lease``'s job and name it for the task; the ``dbqueue``
        context (admin URL) is filled only if an event is captured."""
        scope.set_tag(TASK, lease.task)
        scope.set_tag(QUEUE, lease.queue)
        scope.set_tag(JOB_ID, str(lease.job_id))
        scope.set_tag(ATTEMPT, str(lease.attempt))
        scope.set_transaction_name(lease.task, source="task")

        def add_context(event: Event, hint: Hint) -> Event:
            event.setdefault("contexts", {})[CONTEXT] = self._context_of(lease)
            return event

        scope.add_event_processor(add_context)

    def _context_of(self, lease: Lease) -> dict[str, Any]:
        """The ``dbqueue`` event context: the job, its attempts, its worker, its admin URL."""
        return {
            "job_id": lease.job_id,
            "task": lease.task,
            "queue": lease.queue,
            "attempt": lease.attempt,
            "max_attempts": lease.max_attempts,
            "worker_id": lease.worker_id,
            "admin_url": self._admin_url(lease.job_id),
        }

    def _admin_url(self, job_id: int) -> str | None:
        """The job's page in the admin, after ``admin_base_url``; ``None`` when the project's
        URLconf has no Django admin (``admin:`` namespace) with django_dbqueue in it."""
        try:
            path = reverse("admin:django_dbqueue_job_change", args=[job_id])
        except NoReverseMatch:
            return None
        return self.admin_base_url.rstrip("/") + path


class SentryEveryAttemptMiddleware(SentryMiddleware):
    """``SentryMiddleware`` that reports every failed attempt, retried ones too (one line)."""

    report_every_attempt = True
