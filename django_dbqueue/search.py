"""The admin's search: a term turned into small index-backed queries, one per kind of match.

What a term matches, and how (the search box's help text says the same):

- a job id: the term in ASCII digits within a bigint's range, by primary key;
- a dedupe key or a subject id: exactly, through ``dbqueue_job_dedupe_key`` and
  ``dbqueue_job_subject`` (for each content type);
- a task: every known task path (the task registry and the dead jobs' tasks) that
  contains the term, any case, or the term as a whole path; each path through the
  ``(task, id)`` index;
- an error code: exactly, through the error-code index;
- error text (PostgreSQL with ``pg_trgm``): any part of the last error, any case, through
  the trigram index ``error_search_index`` builds. Without it, or on another database,
  the error text is not searched (an error code still is).

Each kind reads at most ``MATCHES`` rows, newest first, from its index, and the result
is the newest ``MATCHES`` jobs of them all, as a primary-key filter (``lookups.among``:
one array parameter on PostgreSQL): never one ``OR`` over the whole table, which a
planner answers by reading it end to end (or, under ``ORDER BY id DESC LIMIT``, by
walking the whole primary key backwards).
"""

from __future__ import annotations

import heapq
import re

from django.contrib.contenttypes.models import ContentType
from django.db import connections
from django.db.models import Q, QuerySet

from django_dbqueue import dead_jobs, registry, sql
from django_dbqueue.lookups import among
from django_dbqueue.models import EVERY_JOB, Job

#: Jobs a search lists at most: the newest matches.
MATCHES = 1000
#: Jobs with an error a search in error text reads newest first before it asks the
#: trigram index.
RECENT_FAILED = 20_000
#: Task paths one term may expand to; a shorter term that matches more lists the first ones.
TASK_PATHS = 50
#: A term that may be a job id, and the largest id a BigAutoField holds.
JOB_ID = re.compile(r"[0-9]{1,19}")
MAX_JOB_ID = 2**63 - 1
#: The search box's help text.
HELP_TEXT = (
    "Matches a job id, a dedupe key or a subject id exactly; a task by any part of its path "
    "(tasks this process imported, or with dead jobs) or its whole path; an error code "
    "exactly; and, on PostgreSQL with pg_trgm, any part of the last error. Lists the newest "
    f"{MATCHES:,} matches."
)


def matching(jobs: QuerySet[Job], term: str) -> QuerySet[Job]:
    """``jobs`` narrowed to the newest ``MATCHES`` that ``term`` matches in any kind."""
    term = term.strip()
    if not term:
        return jobs
    found: set[int] = set()
    for query in queries(jobs, term):
        found.update(ids(query))
    if searches_error_text(jobs.db):
        found.update(error_text_ids(jobs, term))
    # none(), not an empty list: a query known to be empty is never sent (nor EXPLAINed).
    narrowed: QuerySet[Job] = (
        jobs.filter(among(heapq.nlargest(MATCHES, found))) if found else jobs.none()
    )
    return narrowed


def queries(jobs: QuerySet[Job], term: str) -> list[QuerySet[Job]]:
    """One small query per kind (and per task path) that ``term`` can be."""
    kinds = [
        jobs.filter(dedupe_key=term),
        # Every content type, so that dbqueue_job_subject (type, id) is read by both columns.
        jobs.filter(subject_type__in=subject_types(jobs.db), subject_id=term),
        jobs.filter(last_error_code=term),
        *(jobs.filter(EVERY_JOB, task=path) for path in task_paths(jobs, term)),
    ]
    if JOB_ID.fullmatch(term) and int(term) <= MAX_JOB_ID:
        kinds.append(jobs.filter(pk=int(term)))
    return kinds


def ids(jobs: QuerySet[Job]) -> list[int]:
    """The ids of the newest ``MATCHES`` of ``jobs``."""
    return list(jobs.order_by("-pk").values_list("pk", flat=True)[:MATCHES])


def error_text_ids(jobs: QuerySet[Job], term: str) -> list[int]:
    """The ids of the newest ``MATCHES`` of ``jobs`` whose last error holds ``term`` (any case).

    First among the newest ``RECENT_FAILED`` jobs with an error (sql
    ``error_search_recent``): a word found in many errors stops there, having read
    about ``MATCHES`` rows. Only when that finds fewer than ``MATCHES`` (after the
    list's filters) does the trigram index answer for the whole table; the term is
    then rare among recent errors, so its matches are few to fetch.
    """
    connection = connections[jobs.db]
    pattern = f"%{connection.ops.prep_for_like_query(term)}%"
    params = {"pattern": pattern, "window": RECENT_FAILED, "limit": MATCHES}
    recent = [row["id"] for row in sql.run(connection, "error_search_recent", params)]
    newest = ids(jobs.filter(among(recent))) if recent else []
    if len(newest) >= MATCHES:
        return newest
    # The trigram index's condition and expression: UPPER(last_error) LIKE UPPER('%term%').
    return ids(jobs.filter(~Q(last_error=""), last_error__icontains=term))


def task_paths(jobs: QuerySet[Job], term: str) -> list[str]:
    """The known task paths containing ``term`` (any case), and ``term`` itself."""
    folded = term.casefold()
    known = known_tasks(jobs.db)
    paths = [path for path in known if folded in path.casefold()][:TASK_PATHS]
    return paths if term in paths else [term, *paths[: TASK_PATHS - 1]]


def known_tasks(alias: str) -> list[str]:
    """The task paths of the registry and of the dead jobs (``dead_jobs.counts``: read
    once for the page's health table, filters and search), sorted."""
    dead = {kind.task for kind in dead_jobs.counts(alias)}
    return sorted({*registry.task_paths(), *dead})


def subject_types(alias: str) -> list[int]:
    """The ids of every content type (few: one per model), for the subject search."""
    return list(ContentType.objects.db_manager(alias).values_list("pk", flat=True))


def searches_error_text(alias: str) -> bool:
    """Whether the error text is searched: PostgreSQL with the valid trigram index."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return False
    (ready,) = sql.run(connection, "error_search_ready", {})
    return bool(ready["indexed"])
