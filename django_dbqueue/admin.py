"""Dead-letter triage in the Django admin.

The job list shows what is stuck and why, with queue health above it. Every
action goes through the same lease-protocol functions the workers use, so a
job whose state changed meanwhile is skipped and reported, never overwritten.
Nobody edits lifecycle fields by hand. A job of a workflow lists, on its own
page, the jobs it waits for and the jobs waiting for it (read-only, each list
bounded), and links to the list of every job of its workflow. The queue health
table above the list pauses and resumes queues (``pauses``), for users who may
change jobs, each logged like the actions. Replace the registration the usual
way (``admin.site.unregister(Job)``) to customise it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.admin.utils import flatten_fieldsets, unquote
from django.core.exceptions import PermissionDenied
from django.db import connections, transaction
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince
from django.views.decorators.http import require_POST

from django_dbqueue import (
    clock,
    dashboard,
    dead_jobs,
    leases,
    pauses,
    progress,
    reaper,
    search,
    triage,
)
from django_dbqueue.listing import (
    LINKED_PARAMETERS,
    NEWEST_FIRST,
    BlockedFilter,
    DependenciesFilter,
    DependentsFilter,
    ErrorCodeFilter,
    EstimatedCountPaginator,
    QueueFilter,
    ReadChangeList,
    TaskFilter,
    WorkflowFilter,
)
from django_dbqueue.models import TERMINAL_STATES, Dependency, Job, JobState, QueuePause

STATE_COLOURS = {
    JobState.WAITING: "#6a1b9a",
    JobState.READY: "#1565c0",
    JobState.RUNNING: "#ef6c00",
    JobState.SUCCEEDED: "#2e7d32",
    JobState.DEAD: "#c62828",
    JobState.CANCELLED: "#757575",
}
#: Jobs one admin action changes per transaction; "select all" runs batch after batch.
ACTION_BATCH = triage.BATCH
#: Dead jobs the requeue confirmation lists; it counts the rest.
PREVIEW_ROWS = 100
#: The actions the job's own page offers as buttons, with their labels.
PAGE_LABELS = {
    "requeue_dead": "Requeue",
    "cancel_ready": "Cancel",
    "request_cancel": "Ask to stop (cancel)",
    "run_now": "Run now",
}
#: Columns the list page never needs: kept out of its query.
HEAVY_FIELDS = ("args", "kwargs", "result", "errors", "meta")
#: Dependencies, and dependents, the job's page lists; it counts the rest and links to them.
LINKED_ROWS = 100
#: The fields of the "Workflow" fieldset, shown for a job with dependencies or dependents.
WORKFLOW_FIELDS = ("dependencies_table", "dependents_table", "workflow_link")


class StateFilter(admin.SimpleListFilter):
    """Filter by state, labelled with the state words themselves (as in logs and badges)."""

    title = "state"
    parameter_name = "state__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state, state) for state in JobState.values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(state=self.value()) if self.value() else queryset


class RequeueForm(forms.Form):
    extra_attempts = forms.IntegerField(
        min_value=1,
        max_value=leases.MAX_EXTRA_ATTEMPTS,
        initial=1,
        help_text="Attempts granted on top of the budget.",
    )


def pretty_json(value: object) -> SafeString:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


def badge(state: str) -> SafeString:
    """The state word on its colour, as the list's state column shows it."""
    return format_html(
        '<span style="background:{};color:#fff;padding:1px 6px;border-radius:8px">{}</span>',
        STATE_COLOURS.get(state, "#000"),
        state,
    )


def change_link(job_id: int) -> str:
    return reverse("admin:django_dbqueue_job_change", args=[job_id])


def changelist_link(**params: object) -> str:
    query = "&".join(f"{name}={value}" for name, value in params.items())
    return f"{reverse('admin:django_dbqueue_job_changelist')}?{query}"


@dataclass(frozen=True)
class LinkedJob:
    """One edge as the job's page lists it: the job at its other end, and the edge itself.

    ``task`` and ``state`` are ``None`` when that job no longer exists (deleted).
    """

    job_id: int
    task: str | None
    state: str | None
    edge_state: str
    on_failure: str


@dataclass(frozen=True)
class LinkedJobs:
    """The first ``LINKED_ROWS`` jobs a job waits for and waiting for it, and how many in all."""

    dependencies: list[LinkedJob]
    dependencies_total: int
    dependents: list[LinkedJob]
    dependents_total: int

    @property
    def any(self) -> bool:
        return bool(self.dependencies_total or self.dependents_total)


def linked_jobs(job: Job) -> LinkedJobs:
    """What the job's page lists of its workflow, read where ``job`` was read.

    At most five short queries, whatever the fan-in or fan-out (two for a job
    outside any workflow): the first ``LINKED_ROWS`` + 1 edges each way
    (dependencies in ``position`` order through the ``(job, position)`` index,
    dependents in id order through the ``(depends_on, job)`` index), a count
    only for a list that is longer, and the linked jobs' task and state by
    primary key. Cached on ``job``: the page's fieldsets and three fields read
    it once.
    """
    cached: LinkedJobs | None = getattr(job, "_dbqueue_linked_jobs", None)
    if cached is not None:
        return cached
    edges = Dependency.objects.using(job._state.db)
    dependencies, dependencies_total = _edges(
        edges.filter(job_id=job.pk).order_by("position"), "depends_on_id"
    )
    dependents, dependents_total = _edges(
        edges.filter(depends_on_id=job.pk).order_by("job_id"), "job_id"
    )
    ids = {row[0] for row in dependencies + dependents}
    jobs = {
        pk: (task, state)
        for pk, task, state in Job.objects.using(job._state.db)
        .filter(pk__in=ids)
        .values_list("pk", "task", "state")
    }

    def rows(found: list[tuple[int, str, str]]) -> list[LinkedJob]:
        return [
            LinkedJob(job_id, *jobs.get(job_id, (None, None)), edge_state, on_failure)
            for job_id, edge_state, on_failure in found
        ]

    linked = LinkedJobs(rows(dependencies), dependencies_total, rows(dependents), dependents_total)
    setattr(job, "_dbqueue_linked_jobs", linked)  # noqa: B010 - not a declared attribute
    return linked


def _edges(edges: QuerySet[Dependency], other_end: str) -> tuple[list[tuple[int, str, str]], int]:
    """``(other end's job id, edge state, on_failure)`` of the first ``LINKED_ROWS`` of
    ``edges``, and how many there are in all (counted only past ``LINKED_ROWS``)."""
    found = list(edges.values_list(other_end, "state", "on_failure")[: LINKED_ROWS + 1])
    total = len(found) if len(found) <= LINKED_ROWS else edges.count()
    return found[:LINKED_ROWS], total


if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldsetSpec

    ModelAdmin = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic for type checkers only.
    ModelAdmin = admin.ModelAdmin


@admin.register(Job)
class JobAdmin(ModelAdmin):
    list_display = (
        "state_badge",
        "id",
        "task_name",
        "queue",
        "attempts_used",
        "progress_summary",
        "last_error_code",
        "last_error_line",
        "age",
    )
    list_display_links = ("id",)
    list_filter = (
        StateFilter,
        QueueFilter,
        TaskFilter,
        ErrorCodeFilter,
        BlockedFilter,
        WorkflowFilter,
        DependenciesFilter,
        DependentsFilter,
    )
    # Shows the search box; ``get_search_results`` (``search.matching``) does the matching.
    search_fields = ("task",)
    search_help_text = search.HELP_TEXT
    ordering = ("-id",)
    list_per_page = 100
    # Big tables: no second COUNT(*) of the whole table; estimated counts past a threshold.
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    date_hierarchy = None
    actions = ("requeue_dead", "cancel_ready", "request_cancel", "run_now", "delete_finished")
    change_list_template = "admin/django_dbqueue/job/change_list.html"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "state_badge",
                    "task",
                    "queue",
                    "priority",
                    "attempts_used",
                    "progress_detail",
                )
            },
        ),
        ("Timeline", {"fields": ("created_at", "run_at", "started_at", "finished_at")}),
        (
            "Call",
            {"fields": ("arguments", "result_json", "subject_link", "dedupe_key", "meta_json")},
        ),
        (
            "Lease",
            {
                "fields": (
                    "worker_id",
                    "lease_token",
                    "lease_until",
                    "lease_seconds",
                    "cancel_requested_at",
                )
            },
        ),
        ("Errors", {"fields": ("last_error_code", "last_error_text", "error_history")}),
    )

    # --- list and detail -------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).defer(*HEAVY_FIELDS)

    def get_ordering(self, request: HttpRequest) -> Any:
        """Newest first; by ``listing.NEWEST_FIRST`` while a linked-jobs filter is on (a
        workflow, a job's dependencies or dependents), so its cost is bounded by their number."""
        if any(request.GET.get(name) for name in LINKED_PARAMETERS):
            return [NEWEST_FIRST]
        return super().get_ordering(request)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """The newest jobs the term matches, each kind through an index (``search``).

        A term that is not a valid id (``²``, a 40-digit number) is searched as text only,
        never a 500.
        """
        return search.matching(queryset, search_term), False

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        return [*flatten_fieldsets(self.fieldsets), *WORKFLOW_FIELDS]

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> _FieldsetSpec:
        """``fieldsets``, and after the timeline a "Workflow" one for a job with dependencies
        or dependents (``linked_jobs``)."""
        fieldsets = self.fieldsets
        if obj is None or not linked_jobs(obj).any:
            return fieldsets
        return (*fieldsets[:2], ("Workflow", {"fields": WORKFLOW_FIELDS}), *fieldsets[2:])

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        """Actions may change jobs; nobody edits a job's fields by hand (read-only page)."""
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        """Only terminal jobs may be deleted: a ready or running job's page offers no Delete."""
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or obj.state in TERMINAL_STATES)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        """The job actions, without the site-wide ``delete_selected`` (it ignores state).

        ``action_location`` is Django 6.1's (list or change page); older Django passes none.
        """
        located = {} if action_location is None else {"action_location": action_location}
        actions = super().get_actions(request, **located)
        actions.pop("delete_selected", None)
        return actions

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        """Delete through ``reaper.delete_finished``: a job requeued meanwhile is kept (403)."""
        if not reaper.delete_finished([obj.pk]):
            raise PermissionDenied(f"Job {obj.pk} is no longer finished; it was not deleted.")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        reaper.delete_finished(queryset.values_list("pk", flat=True))

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        """Requeue changes state (change permission) and grants attempts (``requeue_job``)."""
        return self.has_change_permission(request) and request.user.has_perm(
            "django_dbqueue.requeue_job"
        )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ReadChangeList]:
        return ReadChangeList

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        """Act on the selection as the primary has it, never as a lagging replica shows it.

        ``args``/``kwargs``: Django 6.1's ``action_location``, passed on as given.
        """
        primary = self.get_queryset(request).db
        return super().response_action(request, queryset.using(primary), *args, **kwargs)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The job list with the queue health above it; the two share one read of the dead
        jobs (``dead_jobs.one_read``)."""
        with dead_jobs.one_read():
            context = {
                **dashboard.context(),
                "queue_pause_allowed": self.has_change_permission(request),
                **(extra_context or {}),
            }
            return super().changelist_view(request, context)

    # --- the job's own page: the actions that fit its state, as buttons ------------------

    def get_urls(self) -> list[URLPattern]:
        triage_url = path(
            "<path:object_id>/triage/",
            self.admin_site.admin_view(self.triage_view),
            name="django_dbqueue_job_triage",
        )
        queue_urls = [
            path(
                "queues/pause/",
                self._queue_view(self.pause_queue_view),
                name="django_dbqueue_job_pause_queue",
            ),
            path(
                "queues/resume/",
                self._queue_view(self.resume_queue_view),
                name="django_dbqueue_job_resume_queue",
            ),
        ]
        return [triage_url, *queue_urls, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        job = self.get_object(request, unquote(object_id))
        buttons = self.page_actions(request, job) if job is not None else []
        context = {
            "triage_buttons": buttons,
            "requeue_form": RequeueForm(),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, context)

    def page_actions(self, request: HttpRequest, job: Job) -> list[tuple[str, str]]:
        """``(action, label)`` for each action the user may run and the job's state allows."""
        fitting = {
            JobState.DEAD: ["requeue_dead"],
            JobState.WAITING: ["cancel_ready"],
            JobState.READY: ["cancel_ready", *(["run_now"] if job.run_at > timezone.now() else [])],
            JobState.RUNNING: [] if job.cancel_requested_at else ["request_cancel"],
        }.get(JobState(job.state), [])
        allowed = self.get_actions(request)
        return [(name, PAGE_LABELS[name]) for name in fitting if name in allowed]

    def triage_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Run one action (POST ``action``) on this job, exactly as the list's action does.

        The same action method, so the same permission and protocol function, and
        a ``LogEntry``; an action the user may not run is refused (403).
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        job = self.get_object(request, unquote(object_id))
        if job is None:
            raise Http404(f"No job with id {object_id!r}.")
        name = request.POST.get("action", "")
        allowed = self.get_actions(request)
        if name not in PAGE_LABELS or name not in allowed:
            raise PermissionDenied(f"You may not run {name!r} on jobs.")
        # Django 6.1 describes an action with an Action (``func``), older Django with a tuple.
        entry = allowed[name]
        action = entry.func if hasattr(entry, "func") else entry[0]
        response = action(self, request, self.get_queryset(request).filter(pk=job.pk))
        change_page = reverse("admin:django_dbqueue_job_change", args=[job.pk])
        return response or HttpResponseRedirect(change_page)

    # --- the queue health table: Pause and Resume ------------------------------------------

    def _queue_view(
        self, view: Callable[[HttpRequest], HttpResponse]
    ) -> Callable[[HttpRequest], HttpResponse]:
        """``view`` for POST only (else 405), behind the admin's login and CSRF check, and
        outside ``ATOMIC_REQUESTS`` on every database: its write commits at once, so every
        worker sees it before the reply, and a later error of the request cannot undo it."""
        wrapped = self.admin_site.admin_view(require_POST(view))
        for alias in connections:
            wrapped = transaction.non_atomic_requests(using=alias)(wrapped)
        return wrapped

    def pause_queue_view(self, request: HttpRequest) -> HttpResponse:
        """Pause one queue (POST ``queue``, ``period``: one of ``dashboard.PAUSE_PERIODS``)
        through ``pauses.pause``, and log it (``CHANGE`` of its ``QueuePause``).

        Needs the change permission on jobs (else 403). A form that does not validate
        writes nothing and says why.
        """
        self._check_queue_permission(request)
        form = dashboard.PauseForm(request.POST)
        if not form.is_valid():
            return self._refuse(request, "paused", form)
        (pause,) = pauses.pause(
            [form.cleaned_data["queue"]],
            seconds=form.cleaned_data["period"],
            actor=request.user.get_username(),
        )
        ends = "resumed" if pause.until is None else clock.stamp(pause.until)
        self._log_queue(request, pause, CHANGE, f"Paused until {ends}")
        self.message_user(request, dashboard.paused_message(pause), messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:django_dbqueue_job_changelist"))

    def resume_queue_view(self, request: HttpRequest) -> HttpResponse:
        """Resume one queue (POST ``queue``) through ``pauses.resume``, and log it
        (``DELETION`` of its ``QueuePause``) if it was paused; otherwise say so.

        Needs the change permission on jobs (else 403). A form that does not validate
        writes nothing and says why.
        """
        self._check_queue_permission(request)
        form = dashboard.QueueForm(request.POST)
        if not form.is_valid():
            return self._refuse(request, "resumed", form)
        queue = form.cleaned_data["queue"]
        if pauses.resume([queue]):
            self._log_queue(request, QueuePause(queue=queue), DELETION, "Resumed")
            text = f"Queue {queue} resumed: workers claim its jobs again."
            self.message_user(request, text, messages.SUCCESS)
        else:
            text = f"Queue {queue} was not paused; nothing changed."
            self.message_user(request, text, messages.WARNING)
        return HttpResponseRedirect(reverse("admin:django_dbqueue_job_changelist"))

    def _check_queue_permission(self, request: HttpRequest) -> None:
        """Pausing stops jobs from starting: the change permission on jobs, as the actions."""
        if not self.has_change_permission(request):
            raise PermissionDenied("You may not pause or resume queues: you may not change jobs.")

    def _log_queue(self, request: HttpRequest, pause: QueuePause, flag: int, verb: str) -> None:
        """A ``LogEntry`` for the queue's ``QueuePause`` (``object_id``: the queue's name)."""
        LogEntry.objects.log_actions(
            user_id=request.user.pk,
            queryset=[pause],
            action_flag=flag,
            change_message=f"{verb} (admin)",
        )

    def _refuse(self, request: HttpRequest, verb: str, form: forms.Form) -> HttpResponse:
        """Say why ``form`` was refused; back to the list, nothing written."""
        reasons = " ".join(str(error) for errors in form.errors.values() for error in errors)
        self.message_user(request, f"No queue was {verb}: {reasons}", messages.ERROR)
        return HttpResponseRedirect(reverse("admin:django_dbqueue_job_changelist"))

    @admin.display(description="state", ordering="state")
    def state_badge(self, job: Job) -> SafeString:
        """The state word on its colour; a job an operator asked to stop says so beside it."""
        shown = badge(job.state)
        if job.cancel_requested_at is None:
            return shown
        return format_html(
            '{} <span class="dbqueue-cancel-requested" title="cancel requested {}">'
            "cancel requested</span>",
            shown,
            job.cancel_requested_at.isoformat(timespec="seconds"),
        )

    @admin.display(description="task", ordering="task")
    def task_name(self, job: Job) -> SafeString:
        """The function's name; the full import path on hover (and on the job's page)."""
        return format_html('<span title="{}">{}</span>', job.task, job.task.rsplit(".", 1)[-1])

    @admin.display(description="attempts", ordering="attempts")
    def attempts_used(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @admin.display(description="progress")
    def progress_summary(self, job: Job) -> SafeString | str:
        """The latest attempt's progress (a column of the row: no query); its message on hover."""
        report = job.current_progress
        if report is None:
            return "-"
        return format_html(
            '<span title="{}">{}</span>', report.get("message", ""), progress.summary(report)
        )

    @admin.display(description="progress")
    def progress_detail(self, job: Job) -> SafeString | str:
        """The latest attempt's progress, its message, and when it was reported."""
        report = job.current_progress
        if report is None:
            return "-"
        return format_html(
            '{}<br>{}<br><small title="{}">attempt {}, reported {}</small>',
            progress.summary(report),
            report.get("message") or "-",
            report.get("at"),
            report.get("attempt"),
            _ago(parse_datetime(str(report.get("at", "")))),
        )

    @admin.display(description="age", ordering="created_at")
    def age(self, job: Job) -> str:
        return timesince(job.created_at, timezone.now())

    @admin.display(description="last error")
    def last_error_line(self, job: Job) -> str:
        return job.last_error_line[:200]

    @admin.display(description="last error (end of traceback)")
    def last_error_text(self, job: Job) -> SafeString | str:
        return format_html("<pre>{}</pre>", job.last_error) if job.last_error else "-"

    @admin.display(description="arguments")
    def arguments(self, job: Job) -> SafeString:
        return pretty_json({"args": job.args, "kwargs": job.kwargs})

    @admin.display(description="result")
    def result_json(self, job: Job) -> SafeString:
        return pretty_json(job.result)

    @admin.display(description="meta")
    def meta_json(self, job: Job) -> SafeString | str:
        """What the enqueue hooks recorded (a trace context, a request id); "-" for nothing."""
        return "-" if job.meta is None else pretty_json(job.meta)

    @admin.display(description="subject")
    def subject_link(self, job: Job) -> SafeString | str:
        if job.subject_type is None:
            return "-"
        label = f"{job.subject_type.app_label}.{job.subject_type.model} {job.subject_id}"
        try:
            url = reverse(
                f"admin:{job.subject_type.app_label}_{job.subject_type.model}_change",
                args=[job.subject_id],
            )
        except NoReverseMatch:
            return label
        return format_html('<a href="{}">{}</a>', url, label)

    @admin.display(description="error history")
    def error_history(self, job: Job) -> SafeString | str:
        if not job.errors:
            return "-"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}"
            "<details><summary>traceback</summary><pre>{}</pre></details></td></tr>",
            (
                (
                    entry.get("attempt"),
                    entry.get("worker"),
                    entry.get("at"),
                    entry.get("code"),
                    entry.get("message"),
                    entry.get("traceback") or "-",
                )
                for entry in job.errors
            ),
        )
        return format_html(
            "<table><thead><tr><th>attempt</th><th>worker</th><th>when</th><th>code</th>"
            "<th>message</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="depends on")
    def dependencies_table(self, job: Job) -> SafeString | str:
        """The jobs this one waits for, in ``after=`` order, each linked to its page; past
        ``LINKED_ROWS``, how many more, linked to the list of them all."""
        linked = linked_jobs(job)
        more = changelist_link(depended_on_by=job.pk)
        return _linked_table(linked.dependencies, linked.dependencies_total, more)

    @admin.display(description="waited for by")
    def dependents_table(self, job: Job) -> SafeString | str:
        """The jobs waiting for this one (or that waited), by id, each linked to its page;
        past ``LINKED_ROWS``, how many more, linked to the list of them all."""
        linked = linked_jobs(job)
        more = changelist_link(depends_on=job.pk)
        return _linked_table(linked.dependents, linked.dependents_total, more)

    @admin.display(description="workflow")
    def workflow_link(self, job: Job) -> SafeString | str:
        """A link to the list of every job of this job's workflow (``WorkflowFilter``)."""
        if not linked_jobs(job).any:
            return "-"
        return format_html(
            '<a class="dbqueue-workflow" href="{}">every job of this workflow</a>',
            changelist_link(workflow=job.pk),
        )

    # --- actions -------------------------------------------------------------------------

    @admin.action(description="Requeue dead jobs with more attempts", permissions=["requeue"])
    def requeue_dead(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        form = RequeueForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            self._requeue(request, queryset, form.cleaned_data["extra_attempts"])
            return None
        dead = queryset.filter(state=JobState.DEAD)
        dead_count = dead.count()
        context = {
            **self.admin_site.each_context(request),
            "title": "Requeue dead jobs",
            "opts": self.model._meta,
            "form": form,
            "jobs": dead[:PREVIEW_ROWS],
            "dead_count": dead_count,
            "skipped": queryset.count() - dead_count,
            # As Django's delete confirmation: re-post what the page posted (at most a page of
            # ids) and "select all"; the form posts to this URL, so the filters and search
            # that built the selection come back with it, never one field per selected job.
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across") == "1",
            "action": "requeue_dead",
        }
        return TemplateResponse(request, "admin/django_dbqueue/job/requeue_dead.html", context)

    def _requeue(self, request: HttpRequest, queryset: QuerySet[Job], extra: int) -> None:
        """Requeue via ``leases.requeue_report``; name the jobs kept dead for their dedupe key,
        and count the workflow jobs their failure had cancelled, waiting for them again."""
        duplicates: list[int] = []
        waiting_again: list[int] = []

        def requeue(ids: Iterable[int]) -> list[int]:
            result = leases.requeue_report(ids, extra, actor=request.user.get_username())
            duplicates.extend(result.duplicates)
            waiting_again.extend(result.waiting_again)
            return result.requeued

        self._apply(request, queryset, requeue, f"Requeued with {extra} more attempt(s)")
        if waiting_again:
            self.message_user(
                request,
                f"Waiting again for the jobs requeued, which their failure had cancelled: "
                f"{triage.named(waiting_again)}.",
            )
        if duplicates:
            self.message_user(
                request,
                f"Not requeued, because another job with the same task and dedupe key is "
                f"active or was requeued first: {triage.named(duplicates)}.",
                messages.WARNING,
            )

    @admin.action(description="Cancel ready or waiting jobs", permissions=["change"])
    def cancel_ready(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, leases.cancel, "Cancelled")

    @admin.action(
        description="Ask running jobs to stop (cooperative cancel)", permissions=["change"]
    )
    def request_cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(
            request,
            queryset,
            lambda ids: leases.request_cancel(ids, actor=request.user.get_username()),
            "Cancel requested",
        )

    @admin.action(description="Run now (ready jobs scheduled later)", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, leases.run_now, "Made due now")

    @admin.action(description="Delete finished jobs", permissions=["delete"])
    def delete_finished(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._apply(request, queryset, reaper.delete_finished, "Deleted", DELETION)

    def _apply(
        self,
        request: HttpRequest,
        queryset: QuerySet[Job],
        transition: Callable[[Iterable[int]], list[int]],
        verb: str,
        flag: int = CHANGE,
    ) -> None:
        """Run ``transition`` on the selection in batches; log the changed jobs, report the rest.

        Batches of ``ACTION_BATCH`` jobs in id order, each its own short transaction,
        so "select all" over any number of jobs holds no long lock and no giant list.
        """
        selected = changed = 0
        for batch in triage.batches(queryset, ACTION_BATCH):
            jobs = {job.pk: job for job in batch}
            done = transition(list(jobs))
            LogEntry.objects.log_actions(
                user_id=request.user.pk,
                queryset=[jobs[job_id] for job_id in done],
                action_flag=flag,
                change_message=f"{verb} (admin action)",
            )
            selected += len(jobs)
            changed += len(done)
        self._report(request, verb, changed, selected - changed)

    def _report(self, request: HttpRequest, verb: str, changed: int, skipped: int) -> None:
        level = messages.SUCCESS if changed else messages.WARNING
        text = f"{verb}: {changed} job(s)."
        if skipped:
            text += f" Skipped {skipped} whose state did not allow it (or changed meanwhile)."
        self.message_user(request, text, level)


def _linked_table(rows: list[LinkedJob], total: int, more_url: str) -> SafeString | str:
    """``rows`` as a table (job, task, state, edge, on failure), each job linked to its page,
    and "and N more" linked to ``more_url`` when ``total`` is more than the rows shown."""
    if not rows:
        return "-"
    body = format_html_join(
        "",
        '<tr><td><a href="{}">{}</a></td><td><span title="{}">{}</span></td><td>{}</td>'
        '<td class="dbqueue-edge-{}">{}</td><td>{}</td></tr>',
        (
            (
                change_link(row.job_id),
                row.job_id,
                row.task or "",
                row.task.rsplit(".", 1)[-1] if row.task else "(deleted)",
                badge(row.state) if row.state else "-",
                row.edge_state,
                row.edge_state,
                row.on_failure,
            )
            for row in rows
        ),
    )
    table = format_html(
        '<table class="dbqueue-linked"><thead><tr><th>job</th><th>task</th><th>state</th>'
        "<th>edge</th><th>on failure</th></tr></thead><tbody>{}</tbody></table>",
        body,
    )
    if total <= len(rows):
        return table
    return format_html(
        '{}<p><a class="dbqueue-more" href="{}">and {} more</a></p>',
        table,
        more_url,
        total - len(rows),
    )


def _ago(at: datetime | None) -> str:
    """How long ago ``at`` was, to the second within the first minute (a report's age)."""
    if at is None:
        return "-"
    now = timezone.now()
    seconds = (now - at).total_seconds()
    return f"{max(0, int(seconds))} s ago" if seconds < 60 else f"{timesince(at, now)} ago"
