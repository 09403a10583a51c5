"""What keeps the admin's job list fast on a table of millions of finished jobs.

An exact ``COUNT(*)`` reads every matching row, so past ``ESTIMATE_ABOVE`` rows,
or when no index serves the filter on a big table, the list shows PostgreSQL's
estimate (the planner's row count for the same query, from ``EXPLAIN``) instead.
The choices of the queue, task and error-code filters come from the rows
operators triage (dead jobs; for queues also ready and running ones), each state
read through its partial index, never from a ``DISTINCT`` over the whole history
(the dead jobs' values read once per page for the health table, all three filters
and the search: ``dead_jobs.one_read``), and, for queues and tasks, from what
needs no row: the configured ``QUEUES`` and the task registry (every task the
process imported, and the queues they name).
Every choice filters through an index over all rows, ``(queue, id)`` or ``(task, id)``.
The list and its filters' choices read from ``READ_DATABASE`` when it is set.

Workflows (``using(after=...)``) add filters that read the dependency edges
through their indexes: ``?workflow=<job id>`` (every job linked to that job,
sql ``workflow_jobs``), ``?depended_on_by=<job id>`` (the jobs it waits for),
``?depends_on=<job id>`` (the jobs waiting for it), each at most
``LINKED_LIMIT`` jobs, and ``?blocked=yes`` (the jobs a failed dependency
holds). The first three show in the sidebar only while in use: the job's page
links to them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import F, OrderBy, QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from django_dbqueue import conf, dead_jobs, registry, sql, stats
from django_dbqueue.lookups import among
from django_dbqueue.models import EVERY_JOB, Dependency, Job, JobState

#: Past this many rows (by the planner's estimate) the list shows the estimate.
ESTIMATE_ABOVE = 10_000
#: Most jobs a linked-jobs filter (``?workflow=``, ``?depends_on=``, ``?depended_on_by=``)
#: lists: the lowest ids (the first enqueued) of more.
LINKED_LIMIT = 10_000
#: The largest job id (``bigint``): a bigger number names no job.
MAX_JOB_ID = 2**63 - 1


def plan_of(queryset: QuerySet[Any]) -> dict[str, Any] | None:
    """The top node of PostgreSQL's plan for ``queryset`` (unordered); ``None`` elsewhere,
    and for a queryset known to be empty (it sends no query)."""
    if connections[queryset.db].vendor != "postgresql" or queryset.query.is_empty():
        return None
    plan: dict[str, Any] = json.loads(queryset.order_by().explain(format="json"))[0]["Plan"]
    return plan


def reads_sequentially(node: dict[str, Any]) -> bool:
    """Whether the plan reads some table from end to end."""
    return node["Node Type"] == "Seq Scan" or any(
        reads_sequentially(child) for child in node.get("Plans", [])
    )


if TYPE_CHECKING:
    JobPaginator = Paginator[Job]
else:  # Paginator is generic for type checkers only.
    JobPaginator = Paginator


class EstimatedCountPaginator(JobPaginator):
    """Counts the list exactly only when that is cheap; else shows the planner's estimate.

    Cheap means at most ``ESTIMATE_ABOVE`` rows (by the estimate) that an index
    finds; a count that would read a big table end to end (a filter no index
    serves) is estimated too. A small table is always counted exactly.
    """

    @cached_property
    def count(self) -> int:
        jobs = self.object_list
        if isinstance(jobs, QuerySet) and (plan := plan_of(jobs)) is not None:
            estimate = int(plan["Plan Rows"])
            if estimate > ESTIMATE_ABOVE or (reads_sequentially(plan) and is_big(jobs)):
                return estimate
        return int(super().count)


def is_big(jobs: QuerySet[Any]) -> bool:
    """Whether the table under ``jobs`` holds more than ``ESTIMATE_ABOVE`` rows (estimated)."""
    whole = plan_of(jobs.model._default_manager.using(jobs.db).all())
    return whole is not None and int(whole["Plan Rows"]) > ESTIMATE_ABOVE


class ReadChangeList(ChangeList):
    """The job list, read from ``READ_DATABASE`` when set: a replica, so it may lag.

    Only what the list shows reads there; actions on the selection read it
    again where the admin's own queryset reads (``JobAdmin.response_action``).
    """

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Job]:
        self.root_queryset = self.root_queryset.using(read_alias(self.root_queryset))
        return super().get_queryset(request, exclude_parameters)


def read_alias(jobs: QuerySet[Job]) -> str:
    """Where the admin's reads of ``jobs`` go: ``READ_DATABASE``, else where ``jobs`` reads."""
    return conf.get().read_database or jobs.db


class TriageValuesFilter(admin.SimpleListFilter):
    """Filter on one column (a field of ``dead_jobs.DeadKind``); its choices are the values
    among dead jobs (``dead_jobs.counts``) and jobs in ``also_states``.

    Each state is read through its partial index, never the whole history. Any
    value still filters (``?queue__exact=old`` works); the one selected is always
    listed.
    """

    field = ""
    also_states: tuple[str, ...] = ()

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        alias = read_alias(model_admin.get_queryset(request))
        values = {getattr(kind, self.field) for kind in dead_jobs.counts(alias)} | self.known()
        if self.also_states:
            jobs = Job.objects.using(alias).order_by()
            first, *rest = (
                jobs.filter(state=state).values_list(self.field, flat=True).distinct()
                for state in self.also_states
            )
            values |= set(first.union(*rest).order_by())
        values -= {""}
        if self.value():
            values.add(str(self.value()))
        return [(value, value) for value in sorted(values)]

    def known(self) -> set[str]:
        """Values listed without reading a row (configured or registered ones)."""
        return set()

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        """The chosen value's jobs; ``EVERY_JOB`` lets the operators' indexes serve them."""
        value = self.value()
        return queryset.filter(EVERY_JOB, **{self.field: value}) if value else queryset


class QueueFilter(TriageValuesFilter):
    """Queues configured (``QUEUES``), named by registered tasks, or with ready, running or
    dead jobs; each choice reads the ``(queue, id)`` index."""

    title = "queue"
    parameter_name = "queue__exact"
    field = "queue"
    also_states = (JobState.READY, JobState.RUNNING)

    def known(self) -> set[str]:
        return {*(conf.get().queues or ()), conf.get().default_queue, *registry.queues()}


class TaskFilter(TriageValuesFilter):
    """Tasks this process imported (the task registry) or with dead jobs; each choice
    reads the ``(task, id)`` index."""

    title = "task"
    parameter_name = "task__exact"
    field = "task"

    def known(self) -> set[str]:
        return set(registry.task_paths())


class ErrorCodeFilter(TriageValuesFilter):
    """Last error codes of dead jobs."""

    title = "last error code"
    parameter_name = "last_error_code__exact"
    field = "last_error_code"


def job_id_param(value: object) -> int | None:
    """``value`` (a query string parameter) as a job id; ``None`` unless it is one: ASCII
    digits naming a positive ``bigint``. Never raises, so a bad link lists nothing, never a 500.
    """
    text = str(value or "")
    if not (text.isascii() and text.isdigit()):
        return None
    job_id = int(text)
    return job_id if 0 < job_id <= MAX_JOB_ID else None


class LinkedJobsFilter(admin.SimpleListFilter):
    """The jobs linked to the job ``?<parameter_name>=<job id>`` names, one way or another.

    Shown in the sidebar only while in use (its one choice is the job named,
    and "All" clears it): the job's page links here. A value that is no job
    id lists nothing. At most ``LINKED_LIMIT`` jobs, the lowest ids; past that
    a warning says the list is cut. The ids are read first, through the
    dependency edges' indexes, so the list costs at most ``LINKED_LIMIT``
    primary-key reads wherever the jobs lie in the table (the admin orders
    such a list so that no index walk stands in for them: ``NEWEST_FIRST``).
    """

    #: The choice's label; ``{}`` is the job id.
    label = "of job {}"
    #: The warning when there are more than ``LINKED_LIMIT``; ``{}`` is the job id.
    too_many = "Job {} has more than {limit:,} of these"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(str(value), self.label.format(value))] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if not self.value():
            return queryset
        job_id = job_id_param(self.value())
        if job_id is None:
            nothing: QuerySet[Job] = queryset.none()
            return nothing
        ids = self.linked_ids(queryset.db, job_id, LINKED_LIMIT + 1)
        if len(ids) > LINKED_LIMIT:
            messages.warning(
                request,
                f"{self.too_many.format(job_id, limit=LINKED_LIMIT)}: only the first "
                f"{LINKED_LIMIT:,} (lowest ids) are listed.",
            )
        linked: QuerySet[Job] = queryset.filter(among(ids[:LINKED_LIMIT]))
        return linked

    def linked_ids(self, alias: str, job_id: int, limit: int) -> list[int]:
        """At most ``limit`` ids of the jobs linked to ``job_id``, lowest first, read on
        ``alias`` (where the list reads)."""
        raise NotImplementedError


class WorkflowFilter(LinkedJobsFilter):
    """``?workflow=<job id>``: every job of that job's workflow, itself included: every job
    linked to it through dependencies, either way (sql ``workflow_jobs``)."""

    title = "workflow"
    parameter_name = "workflow"
    too_many = "The workflow of job {} has more than {limit:,} jobs"

    def linked_ids(self, alias: str, job_id: int, limit: int) -> list[int]:
        rows = sql.run(connections[alias], "workflow_jobs", {"job_id": job_id, "limit": limit})
        return [int(row["id"]) for row in rows]


class EdgeFilter(LinkedJobsFilter):
    """The jobs at the other end of the job's edges one way: the edges whose ``near`` column
    is the job, read through the index that leads with it, give the ``far`` column."""

    near = ""
    far = ""

    def linked_ids(self, alias: str, job_id: int, limit: int) -> list[int]:
        edges = Dependency.objects.using(alias).filter(**{self.near: job_id})
        ids = edges.order_by(self.far).values_list(self.far, flat=True)
        return list(ids.distinct()[:limit])


class DependenciesFilter(EdgeFilter):
    """``?depended_on_by=<job id>``: the jobs that job waits for (its ``after=``), through the
    edges' ``(job, position)`` index."""

    title = "dependencies"
    parameter_name = "depended_on_by"
    too_many = "Job {} depends on more than {limit:,} jobs"
    near, far = "job_id", "depends_on_id"


class DependentsFilter(EdgeFilter):
    """``?depends_on=<job id>``: the jobs waiting for that job (or that waited), through the
    edges' ``(depends_on, job)`` index."""

    title = "dependents"
    parameter_name = "depends_on"
    too_many = "More than {limit:,} jobs depend on job {}"
    near, far = "depends_on_id", "job_id"


#: The query string parameters of the linked-jobs filters.
LINKED_PARAMETERS = tuple(
    each.parameter_name for each in (WorkflowFilter, DependenciesFilter, DependentsFilter)
)
#: The list's order while a linked-jobs filter is on: newest first, as always, but by an
#: expression no index can serve. Else the planner may walk the primary key down from the
#: newest job, expecting the few linked jobs spread evenly through the table, and read
#: millions of rows to find an old workflow; this way it reads the linked ids (at most
#: ``LINKED_LIMIT``) and sorts them.
NEWEST_FIRST = OrderBy(F("id") + 0, descending=True)


class BlockedFilter(admin.SimpleListFilter):
    """``?blocked=yes``: the jobs a failed dependency holds (``stats.blocked_jobs``, the
    figure the health summary counts). Requeueing the dead dependency returns them to waiting."""

    title = "blocked"
    parameter_name = "blocked"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "by a failed dependency")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return stats.blocked_jobs(queryset) if self.value() == "yes" else queryset
