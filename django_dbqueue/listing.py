"""What keeps the admin's job list fast on a table of millions of finished jobs.

An exact ``COUNT(*)`` reads every matching row, so past ``ESTIMATE_ABOVE`` rows,
or when no index serves the filter on a big table, the list shows PostgreSQL's
estimate (the planner's row count for the same query, from ``EXPLAIN``) instead.
The choices of the queue, task and error-code filters come from the rows
operators triage (dead jobs; for queues also ready and running ones), each state
read through its partial index, never from a ``DISTINCT`` over the whole history,
and, for queues and tasks, from what needs no row: the configured ``QUEUES`` and
the task registry (every task the process imported, and the queues they name).
Every choice filters through an index over all rows, ``(queue, id)`` or ``(task, id)``.
The list and its filters' choices read from ``READ_DATABASE`` when it is set.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from django_dbqueue import conf, registry
from django_dbqueue.models import EVERY_JOB, Job, JobState

#: Past this many rows (by the planner's estimate) the list shows the estimate.
ESTIMATE_ABOVE = 10_000


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
    """Filter on one column; its choices are the values among jobs in ``states``.

    Each state is read through its partial index (``UNION``), never the whole
    history. Any value still filters (``?queue__exact=old`` works); the one
    selected is always listed.
    """

    field = ""
    states: tuple[str, ...] = (JobState.DEAD,)

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        jobs = Job.objects.using(read_alias(model_admin.get_queryset(request)))
        per_state = [
            jobs.filter(state=state).order_by().values_list(self.field, flat=True).distinct()
            for state in self.states
        ]
        values = (set(per_state[0].union(*per_state[1:]).order_by()) | self.known()) - {""}
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
    states = (JobState.READY, JobState.RUNNING, JobState.DEAD)

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
