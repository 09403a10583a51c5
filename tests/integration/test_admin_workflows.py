"""What operators see of workflows: waiting and blocked jobs counted everywhere states are
counted (stats, ``dbqueue_stats``, metrics, the admin's summary), a job's dependencies and
dependents on its page, and the job list filtered to one workflow.

Workflows are enqueued as an application does (``using(after=...)``, ``chain``, ``group``)
and run in this process (``testing.run_jobs``).
"""

from __future__ import annotations

import json
import re
from html import unescape
from io import StringIO
from typing import TYPE_CHECKING

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pytest_django import DjangoAssertNumQueries

from django_dbqueue import admin as admin_module
from django_dbqueue import chain, group, listing, metrics
from django_dbqueue.models import Dependency, Job, JobState
from django_dbqueue.stats import QueueStats, queue_stats
from django_dbqueue.testing import run_jobs
from tests.integration.test_admin import (
    CHANGELIST,
    change_url,
    job,
    listed,
    messages_of,
    page_buttons,
    state_of,
    triage_url,
)
from tests.jobs import tasks

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

pytestmark = pytest.mark.django_db


# --- helpers ---------------------------------------------------------------------------------


def stats_of(queue: str = "default") -> QueueStats:
    return queue_stats()[queue]


def command_json(queue: str = "default") -> dict[str, object]:
    out = StringIO()
    call_command("dbqueue_stats", "--json", stdout=out)
    found: dict[str, object] = json.loads(out.getvalue())["queues"][queue]
    return found


def command_row(queue: str = "default") -> dict[str, str]:
    """The ``dbqueue_stats`` table row of ``queue``, cell by column name."""
    out = StringIO()
    call_command("dbqueue_stats", stdout=out)
    header, *lines = out.getvalue().strip().splitlines()
    columns = re.split(r"\s{2,}", header.strip())
    for line in lines:
        cells = line.split()
        if cells and cells[0] == queue:
            return dict(zip(columns, cells, strict=False))
    raise AssertionError(f"no row for {queue!r} in:\n{out.getvalue()}")


def gauge(name: str, queue: str = "default") -> float:
    """A queue gauge as Prometheus scrapes it (a fresh collector: no cached read)."""
    text = generate_latest(metrics.queue_registry()).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"queue": queue}:
                return float(sample.value)
    raise AssertionError(f"no {name}{{queue={queue!r}}} in:\n{text}")


def summary_cells(client: Client, queue: str = "default") -> dict[str, str]:
    """The admin's health summary row of ``queue``, cell by column heading."""
    html = client.get(CHANGELIST).content.decode()
    table = re.search(r'<div class="module" id="dbqueue-health">.*?</table>', html, re.S)
    assert table is not None
    headings = [
        unescape(re.sub(r"<[^>]+>", "", cell)).strip()
        for cell in re.findall(r"<th[^>]*>(.*?)</th>", table.group(), re.S)
    ]
    for row in re.findall(r'<tr class="dbqueue-queue[^"]*"[^>]*>(.*?)</tr>', table.group(), re.S):
        cells = [
            unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        if cells[0] == queue:
            return dict(zip(headings, cells, strict=True))
    raise AssertionError(f"no summary row for {queue!r}")


def summary_link(client: Client, heading: str, queue: str = "default") -> str:
    """Where the summary's ``heading`` cell of ``queue`` links to."""
    html = client.get(CHANGELIST).content.decode()
    table = re.search(r'<div class="module" id="dbqueue-health">.*?</table>', html, re.S)
    assert table is not None
    headings = [
        unescape(re.sub(r"<[^>]+>", "", cell)).strip()
        for cell in re.findall(r"<th[^>]*>(.*?)</th>", table.group(), re.S)
    ]
    rows = re.findall(r'<tr class="dbqueue-queue[^"]*"[^>]*>(.*?)</tr>', table.group(), re.S)
    for row in rows:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if re.sub(r"<[^>]+>", "", cells[0]).strip() == queue:
            href = re.search(r'href="([^"]+)"', cells[headings.index(heading)])
            assert href is not None
            return unescape(href.group(1))
    raise AssertionError(f"no summary row for {queue!r}")


def workflow_section(response: Response) -> str:
    """The HTML of the job page's "Workflow" fieldset ("" when the page has none)."""
    assert response.status_code == 200
    html = response.content.decode()
    found = re.search(r"<h2[^>]*>Workflow</h2>(.*?)</fieldset>", html, re.S)
    return found.group(1) if found else ""


def linked_rows(section: str, field: str) -> list[list[str]]:
    """The rows of the table in the section's ``field`` (its readonly div), as cell texts;
    the job cell as ``"<id> -> <href>"``."""
    block = re.search(rf'field-{field}\b.*?<div class="readonly">(.*?)</div>', section, re.S)
    assert block is not None, field
    rows = []
    for row in re.findall(r"<tr>(<td.*?)</tr>", block.group(1), re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        link = re.fullmatch(r'<a href="([^"]+)">(\d+)</a>', cells[0])
        assert link is not None, row
        texts = [unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in cells[1:]]
        rows.append([f"{link.group(2)} -> {link.group(1)}", *texts])
    return rows


def job_cell(job: Job) -> str:
    return f"{job.pk} -> {change_url(job)}"


def workflow_ids(client: Client, of: Job) -> list[int]:
    """The ids the job list shows for ``?workflow=<of>``, in the order shown."""
    response = client.get(CHANGELIST, {"workflow": of.pk})
    assert response.status_code == 200
    return [job.pk for job in response.context["cl"].result_list]


# --- waiting: counted everywhere --------------------------------------------------------------


def test_waiting_jobs_are_counted_in_stats_command_metrics_and_the_summary(
    admin_client: Client,
) -> None:
    first = tasks.echo.enqueue(1)
    second = tasks.echo.using(after=[first]).enqueue(2)
    tasks.collect.using(after=[first, second]).enqueue()
    tasks.echo.using(queue="mail", after=[first]).enqueue(3)

    assert (stats_of().waiting, stats_of().ready) == (2, 1)
    assert stats_of("mail").waiting == 1
    assert (command_json()["waiting"], command_json()["ready"]) == (2, 1)
    assert (command_row()["waiting"], command_row()["ready"]) == ("2", "1")
    assert gauge("dbqueue_queue_waiting_jobs") == 2
    assert gauge("dbqueue_queue_waiting_jobs", "mail") == 1
    summary = summary_cells(admin_client)
    assert (summary["waiting"], summary["ready now"]) == ("2", "1")
    waiting_href = summary_link(admin_client, "waiting", "mail")
    assert waiting_href == f"{CHANGELIST}?state__exact=waiting&queue__exact=mail"

    run_jobs()

    assert stats_of().waiting == stats_of("mail").waiting == 0
    assert gauge("dbqueue_queue_waiting_jobs") == 0
    assert summary_cells(admin_client)["waiting"] == "0"


def test_the_state_filter_offers_waiting_and_lists_only_waiting_jobs(
    admin_client: Client,
) -> None:
    first = tasks.echo.enqueue(1)
    waiting = [tasks.echo.using(after=[first]).enqueue(n) for n in range(3)]
    job(succeeded=True)

    unfiltered = admin_client.get(CHANGELIST).context["cl"]
    (state_filter,) = [spec for spec in unfiltered.filter_specs if spec.title == "state"]
    assert ("waiting", "waiting") in state_filter.lookup_choices
    response = admin_client.get(CHANGELIST, {"state__exact": "waiting"})
    assert listed(response) == {job.pk for job in waiting}
    html = response.content.decode()
    badge = admin_module.STATE_COLOURS[JobState.WAITING]
    assert html.count(f'<span style="background:{badge};') == len(waiting)


def test_queue_stats_stays_three_queries_with_waiting_and_blocked_jobs(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    dead = tasks.permanent.enqueue()
    tasks.echo.using(after=[dead]).enqueue(1)
    tasks.echo.using(after=[tasks.echo.enqueue(2)]).enqueue(3)
    run_jobs(max_jobs=1)
    with django_assert_num_queries(3):  # the jobs grouped, the dead jobs, the pauses
        found = queue_stats()
    assert (found["default"].waiting, found["default"].blocked) == (1, 1)


# --- blocked: held by a failed dependency -------------------------------------------------------


def test_blocked_jobs_are_counted_until_the_dead_dependency_is_requeued_and_succeeds(
    admin_client: Client,
) -> None:
    root = tasks.permanent.enqueue()
    child = tasks.echo.using(after=[root]).enqueue("child")
    grandchild = tasks.echo.using(after=[child]).enqueue("grandchild")
    in_mail = tasks.echo.using(queue="mail", after=[root]).enqueue("mail")
    finally_step = tasks.echo.using(after=[root], on_dependency_failure="run").enqueue("finally")

    run_jobs()

    assert [state_of(job) for job in (root, child, grandchild, in_mail, finally_step)] == [
        "dead",
        "cancelled",
        "cancelled",
        "cancelled",
        "succeeded",
    ]
    assert (stats_of().blocked, stats_of("mail").blocked) == (2, 1)
    assert command_json()["blocked"] == 2
    assert command_row()["blocked"] == "2"
    assert gauge("dbqueue_jobs_blocked") == 2
    assert gauge("dbqueue_jobs_blocked", "mail") == 1
    assert summary_cells(admin_client)["blocked"] == "2"
    blocked_href = summary_link(admin_client, "blocked")
    assert blocked_href == f"{CHANGELIST}?blocked=yes&queue__exact=default"
    assert listed(admin_client.get(blocked_href)) == {child.pk, grandchild.pk}
    assert listed(admin_client.get(CHANGELIST, {"blocked": "yes"})) == {
        child.pk,
        grandchild.pk,
        in_mail.pk,
    }

    requeued = admin_client.post(
        triage_url(root), {"action": "requeue_dead", "apply": "1", "extra_attempts": "1"}
    )
    assert requeued.status_code == 302
    assert messages_of(requeued)[-1] == (
        "Waiting again for the jobs requeued, which their failure had cancelled: "
        f"{child.pk}, {grandchild.pk}, {in_mail.pk}."
    )
    assert (stats_of().blocked, stats_of().waiting) == (0, 2)
    assert gauge("dbqueue_jobs_blocked") == 0
    Job.objects.filter(pk=root.pk).update(task=tasks.noop.name)  # the cause is fixed
    run_jobs()

    assert {state_of(job) for job in (root, child, grandchild, in_mail)} == {"succeeded"}
    assert (stats_of().blocked, stats_of().waiting) == (0, 0)
    assert stats_of("mail").blocked == 0
    assert command_json()["blocked"] == 0
    assert gauge("dbqueue_jobs_blocked") == gauge("dbqueue_jobs_blocked", "mail") == 0
    assert summary_cells(admin_client)["blocked"] == "0"
    assert listed(admin_client.get(CHANGELIST, {"blocked": "yes"})) == set()


def test_a_job_with_two_failed_dependencies_is_blocked_once(admin_client: Client) -> None:
    first, second = tasks.permanent.enqueue(), tasks.permanent.enqueue()
    held = tasks.collect.using(after=[first, second]).enqueue()
    run_jobs()
    assert state_of(held) == JobState.CANCELLED
    assert Dependency.objects.filter(job=held, state="failed").count() == 2
    assert stats_of().blocked == 1
    assert listed(admin_client.get(CHANGELIST, {"blocked": "yes"})) == {held.pk}


# --- the job's page: its dependencies and dependents ------------------------------------------


def test_the_job_page_lists_dependencies_in_order_and_dependents_with_links(
    admin_client: Client,
) -> None:
    later, sooner = tasks.echo.enqueue("later"), tasks.noop.enqueue()
    callback = tasks.collect.using(after=[later, sooner]).enqueue()
    after_callback = tasks.echo.using(after=[callback]).enqueue("next")
    finally_step = tasks.noop.using(after=[callback], on_dependency_failure="run").enqueue()

    section = workflow_section(admin_client.get(change_url(callback)))

    assert linked_rows(section, "dependencies_table") == [
        [job_cell(later), "echo", "ready", "pending", "cancel"],
        [job_cell(sooner), "noop", "ready", "pending", "cancel"],
    ]
    assert linked_rows(section, "dependents_table") == [
        [job_cell(after_callback), "echo", "waiting", "pending", "cancel"],
        [job_cell(finally_step), "noop", "waiting", "pending", "run"],
    ]
    assert f'href="{CHANGELIST}?workflow={callback.pk}"' in section
    assert "<input" not in section  # read-only
    assert "<select" not in section

    run_jobs()
    settled = workflow_section(admin_client.get(change_url(after_callback)))
    assert linked_rows(settled, "dependencies_table") == [
        [job_cell(callback), "collect", "succeeded", "resolved", "cancel"],
    ]
    assert re.search(r'field-dependents_table\b.*?<div class="readonly">-</div>', settled, re.S)


def test_the_job_page_shows_a_failed_edge_and_the_cancel_it_caused(admin_client: Client) -> None:
    root = tasks.permanent.enqueue()
    held = tasks.echo.using(after=[root]).enqueue(1)
    run_jobs()
    section = workflow_section(admin_client.get(change_url(held)))
    assert linked_rows(section, "dependencies_table") == [
        [job_cell(root), "permanent", "dead", "failed", "cancel"],
    ]
    assert 'class="dbqueue-edge-failed"' in section
    dependents = workflow_section(admin_client.get(change_url(root)))
    assert linked_rows(dependents, "dependents_table") == [
        [job_cell(held), "echo", "cancelled", "failed", "cancel"],
    ]


def test_a_job_outside_any_workflow_has_no_workflow_section(admin_client: Client) -> None:
    alone = tasks.noop.enqueue()
    assert workflow_section(admin_client.get(change_url(alone))) == ""


def test_a_dependency_deleted_meanwhile_is_listed_as_deleted(admin_client: Client) -> None:
    gone = job(succeeded=True)
    waits = tasks.echo.using(after=[gone]).enqueue(1)
    Job.objects.filter(pk=gone.pk).delete()  # no foreign key: the edge stays
    section = workflow_section(admin_client.get(change_url(waits)))
    assert linked_rows(section, "dependencies_table") == [
        [job_cell(gone), "(deleted)", "-", "resolved", "cancel"],
    ]


def test_each_list_is_bounded_and_links_to_the_rest(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_module, "LINKED_ROWS", 3)
    root = tasks.noop.enqueue()
    members = group(tasks.echo.using(after=[root]).step(n) for n in range(5))
    workflow = members.then(tasks.collect.step()).enqueue()
    (callback,) = workflow.last

    section = workflow_section(admin_client.get(change_url(callback)))
    shown = linked_rows(section, "dependencies_table")
    assert [row[0] for row in shown] == [job_cell(job) for job in workflow.jobs[:3]]
    more = re.search(r'<a class="dbqueue-more" href="([^"]+)">and (\d+) more</a>', section)
    assert more is not None
    assert (unescape(more.group(1)), more.group(2)) == (
        f"{CHANGELIST}?depended_on_by={callback.pk}",
        "2",
    )
    assert listed(admin_client.get(unescape(more.group(1)))) == {
        job.pk for job in workflow.jobs[:5]
    }

    fan_out = workflow_section(admin_client.get(change_url(root)))
    assert len(linked_rows(fan_out, "dependents_table")) == 3
    rest = re.search(r'<a class="dbqueue-more" href="([^"]+)">and 2 more</a>', fan_out)
    assert rest is not None
    assert unescape(rest.group(1)) == f"{CHANGELIST}?depends_on={root.pk}"
    assert listed(admin_client.get(unescape(rest.group(1)))) == {
        job.pk for job in workflow.jobs[:5]
    }


def test_the_callback_page_reads_as_much_for_5_members_as_for_50(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page of a group's callback costs the same queries whatever the group's size."""
    monkeypatch.setattr(admin_module, "LINKED_ROWS", 3)

    def callback_page_queries(members: int) -> int:
        (callback,) = (
            group(tasks.echo.step(n) for n in range(members))
            .then(tasks.collect.step())
            .enqueue()
            .last
        )
        with CaptureQueriesContext(connection) as queries:
            section = workflow_section(admin_client.get(change_url(callback)))
        assert f"and {members - 3} more" in section
        return len(queries)

    admin_client.get(CHANGELIST)  # warm per-process caches (content types, templates)
    assert callback_page_queries(5) == callback_page_queries(50)


def test_a_waiting_jobs_page_offers_cancel_which_cancels_what_waits_for_it(
    admin_client: Client,
) -> None:
    first = tasks.echo.enqueue(1)
    waiting = tasks.echo.using(after=[first]).enqueue(2)
    below = tasks.echo.using(after=[waiting]).enqueue(3)
    assert page_buttons(admin_client, waiting) == ["cancel_ready"]
    response = admin_client.post(triage_url(waiting), {"action": "cancel_ready"})
    assert response.status_code == 302
    assert messages_of(response) == ["Cancelled: 1 job(s)."]
    assert (state_of(waiting), state_of(below)) == (JobState.CANCELLED, JobState.CANCELLED)
    assert stats_of().blocked == 1  # ``below``: a failed edge, from ``waiting``'s cancel


# --- the list of one workflow --------------------------------------------------------------------


def test_the_workflow_filter_lists_exactly_the_jobs_of_one_workflow(
    admin_client: Client,
) -> None:
    mine = chain(
        tasks.echo.step("extract"),
        group(tasks.echo.step(n) for n in range(3)),
        tasks.collect.step(),
    ).enqueue()
    theirs = chain(tasks.echo.step("a"), tasks.echo.step("b")).enqueue()
    alone = tasks.noop.enqueue()
    mine_ids = sorted(job.pk for job in mine.jobs)

    for member in mine.jobs:
        assert sorted(workflow_ids(admin_client, member)) == mine_ids
    assert sorted(workflow_ids(admin_client, theirs.jobs[1])) == sorted(
        job.pk for job in theirs.jobs
    )
    assert workflow_ids(admin_client, alone) == [alone.pk]
    # Newest first, as the list always is.
    assert workflow_ids(admin_client, mine.jobs[0]) == sorted(mine_ids, reverse=True)


def test_the_workflow_list_shows_each_steps_state_and_combines_with_other_filters(
    admin_client: Client,
) -> None:
    workflow = chain(tasks.echo.step(1), tasks.echo.step(2), tasks.echo.step(3)).enqueue()
    first, second, third = workflow.jobs
    run_jobs(max_jobs=1)

    response = admin_client.get(CHANGELIST, {"workflow": third.pk})
    html = response.content.decode()
    badges = {
        int(pk): state
        for state, pk in re.findall(
            r'<td class="field-state_badge"><span[^>]*>(\w+)</span></td>'
            r'<th class="field-id"><a href="[^"]*">(\d+)</a>',
            html,
        )
    }
    assert badges == {first.pk: "succeeded", second.pk: "ready", third.pk: "waiting"}
    waiting_only = admin_client.get(
        CHANGELIST, {"workflow": str(third.pk), "state__exact": "waiting"}
    )
    assert listed(waiting_only) == {third.pk}
    (workflow_filter,) = [
        spec for spec in response.context["cl"].filter_specs if spec.title == "workflow"
    ]
    assert workflow_filter.lookup_choices == [(str(third.pk), f"of job {third.pk}")]


def test_the_workflow_filter_is_hidden_unless_used_and_a_bad_value_lists_nothing(
    admin_client: Client,
) -> None:
    tasks.echo.using(after=[tasks.echo.enqueue(1)]).enqueue(2)
    titles = {spec.title for spec in admin_client.get(CHANGELIST).context["cl"].filter_specs}
    assert "workflow" not in titles
    assert "dependencies" not in titles
    assert "dependents" not in titles
    assert "blocked" in titles
    for bad in ("abc", "-1", "0", "²", "9" * 30):
        for parameter in listing.LINKED_PARAMETERS:
            assert listed(admin_client.get(CHANGELIST, {parameter: bad})) == set(), (
                parameter,
                bad,
            )


def test_a_workflow_past_the_limit_lists_the_first_jobs_and_says_so(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "LINKED_LIMIT", 3)
    workflow = group(tasks.echo.step(n) for n in range(5)).then(tasks.collect.step()).enqueue()
    (callback,) = workflow.last
    response = admin_client.get(CHANGELIST, {"workflow": callback.pk})
    assert listed(response) == {job.pk for job in workflow.jobs[:3]}
    assert messages_of(response) == [
        f"The workflow of job {callback.pk} has more than 3 jobs: "
        "only the first 3 (lowest ids) are listed."
    ]


def test_the_workflow_link_on_a_job_page_opens_its_workflow(admin_client: Client) -> None:
    workflow = chain(tasks.echo.step(1), tasks.echo.step(2)).enqueue()
    tasks.echo.using(after=[tasks.echo.enqueue("other")]).enqueue("other")
    section = workflow_section(admin_client.get(change_url(workflow.jobs[0])))
    link = re.search(r'<a class="dbqueue-workflow" href="([^"]+)">', section)
    assert link is not None
    response = admin_client.get(unescape(link.group(1)))
    assert listed(response) == {job.pk for job in workflow.jobs}
