"""The job admin through Django's test client: triage list, read-only detail, safe actions."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import escape
from pytest_django import DjangoAssertNumQueries, Settings

from django_dbqueue import admin as admin_module
from django_dbqueue.errors import ErrorInfo, history_entry
from django_dbqueue.models import Job, JobState
from tests.factories import JobFactory
from tests.jobs import tasks
from tests.testapp.models import Order

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

CHANGELIST = "/admin/django_dbqueue/job/"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "shop/billing.py", line 12, in charge\n'
    "    gateway.charge(card)\n"
    "ValueError: card 4242 declined"
)

pytestmark = pytest.mark.django_db


# --- helpers ---------------------------------------------------------------------------------


def job(**fields: Any) -> Job:
    return JobFactory(**fields)  # type: ignore[no-any-return]


def dead_job(message: str = "card 4242 declined", **fields: Any) -> Job:
    error = ErrorInfo(
        "ValueError", f"ValueError: {message}", TRACEBACK.replace("card 4242 declined", message)
    )
    fields.setdefault("attempts", 2)
    fields.setdefault("max_attempts", 2)
    return job(
        dead=True,
        last_error_code=error.code,
        last_error=error.last_error,
        errors=[
            history_entry(attempt, "w1", error, f"2025-01-0{attempt}T10:00:00+00:00")
            for attempt in range(1, fields["attempts"] + 1)
        ],
        **fields,
    )


def change_url(job: Job) -> str:
    return reverse("admin:django_dbqueue_job_change", args=[job.pk])


def listed(response: Response) -> set[int]:
    """Ids of the jobs on a change list page."""
    assert response.status_code == 200
    return {row.pk for row in response.context["cl"].result_list}


def post_action(client: Client, action: str, jobs: Iterable[Job], **data: str) -> Response:
    """Submit the change list's action form with ``jobs`` ticked, as the browser does."""
    payload: dict[str, Any] = {
        "action": action,
        "_selected_action": [str(j.pk) for j in jobs],
        "index": "0",
        **data,
    }
    return client.post(CHANGELIST, payload)


def apply_requeue(client: Client, jobs: Iterable[Job], extra_attempts: str) -> Response:
    """Submit the requeue intermediate page (no ``index``: Django's confirmation branch)."""
    payload = {
        "action": "requeue_dead",
        "_selected_action": [str(j.pk) for j in jobs],
        "apply": "1",
        "extra_attempts": extra_attempts,
    }
    return client.post(CHANGELIST, payload)


def confirmation_fields(page: Response) -> dict[str, list[str]]:
    """The hidden fields of the requeue confirmation, as the browser re-posts them."""
    html = page.content.decode()
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', html):
        if name != "csrfmiddlewaretoken":
            fields.setdefault(name, []).append(value)
    return fields


def messages_of(response: Response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def state_of(job: Job) -> str:
    return str(Job.objects.values_list("state", flat=True).get(pk=job.pk))


def log_entries(job: Job) -> list[LogEntry]:
    return list(
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(Job), object_id=str(job.pk)
        )
    )


def staff_user(django_user_model: type[User], username: str, *codenames: str) -> User:
    user: User = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_dbqueue", codename__in=codenames)
    )
    return user


def action_names(client: Client) -> set[str]:
    response = client.get(CHANGELIST)
    assert response.status_code == 200
    form = response.context["action_form"]  # None when no action is allowed at all
    return {name for name, _ in form.fields["action"].choices if name} if form else set()


# --- list page -------------------------------------------------------------------------------


class TestListPage:
    def test_shows_state_badge_attempts_error_code_and_last_line_of_the_error(
        self, admin_client: Client
    ) -> None:
        dead = dead_job(attempts=2, max_attempts=5)
        response = admin_client.get(CHANGELIST)
        assert response.status_code == 200
        assert listed(response) == {dead.pk}
        html = response.content.decode()
        assert re.search(r'<span style="background:#c62828;[^"]*">dead</span>', html)
        assert '<td class="field-attempts_used">2/5</td>' in html
        assert '<td class="field-last_error_code">ValueError</td>' in html
        assert '<td class="field-last_error_line">ValueError: card 4242 declined</td>' in html
        assert "Traceback (most recent call last)" not in html

    def test_shows_the_tasks_short_name_with_the_full_path_on_hover(
        self, admin_client: Client
    ) -> None:
        job(task="tests.jobs.tasks.flaky")
        html = admin_client.get(CHANGELIST).content.decode()
        assert (
            '<td class="field-task_name"><span title="tests.jobs.tasks.flaky">flaky</span></td>'
            in html
        )

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("state__exact=dead", {"dead"}),
            ("queue__exact=mail", {"mail"}),
            ("task__exact=tests.jobs.tasks.flaky", {"flaky"}),
            ("last_error_code__exact=LEASE_EXPIRED", {"expired"}),
        ],
    )
    def test_filters_narrow_the_list(
        self, admin_client: Client, query: str, expected: set[str]
    ) -> None:
        jobs = {
            "dead": dead_job(),
            "mail": job(queue="mail"),
            "flaky": job(task="tests.jobs.tasks.flaky"),
            "expired": job(last_error_code="LEASE_EXPIRED", last_error="lease expired"),
        }
        response = admin_client.get(f"{CHANGELIST}?{query}")
        assert listed(response) == {jobs[name].pk for name in expected}

    def test_search_matches_task_dedupe_key_subject_id_and_job_id(
        self, admin_client: Client
    ) -> None:
        order_type = ContentType.objects.get_for_model(Order)
        by_task = job(task="tests.jobs.tasks.flaky")
        by_key = job(dedupe_key="invoice-abc")
        by_subject = job(subject_type=order_type, subject_id="9000001")
        by_id = job()
        searches = {
            "flaky": by_task,
            "invoice-abc": by_key,
            "9000001": by_subject,
            str(by_id.pk): by_id,
        }
        for term, expected in searches.items():
            assert listed(admin_client.get(CHANGELIST, {"q": term})) == {expected.pk}, term

    def test_search_finds_a_registered_task_by_any_part_of_its_path_and_an_error_code(
        self, admin_client: Client
    ) -> None:
        """On every vendor: a task with no dead job, by a fragment in another case; a code."""
        noop = job(task="tests.jobs.tasks.noop", succeeded=True)
        failed = dead_job()
        assert noop.pk in listed(admin_client.get(CHANGELIST, {"q": "JOBS.TASKS.NOO"}))
        assert listed(admin_client.get(CHANGELIST, {"q": "ValueError"})) == {failed.pk}

    def test_search_box_says_what_it_matches_how(self, admin_client: Client) -> None:
        response = admin_client.get(CHANGELIST)
        assert "any part of its path" in response.content.decode()

    @pytest.mark.parametrize("term", ["²", "١٢", "9" * 19, "9" * 40, " 12 ³"])
    def test_search_for_a_term_that_is_no_job_id_lists_matches_without_error(
        self, admin_client: Client, term: str
    ) -> None:
        job(dedupe_key=term.strip())
        job()
        response = admin_client.get(CHANGELIST, {"q": term})
        assert len(listed(response)) == 1

    def test_subject_id_search_is_exact(self, admin_client: Client) -> None:
        order_type = ContentType.objects.get_for_model(Order)
        job(subject_type=order_type, subject_id="9000001")
        assert listed(admin_client.get(CHANGELIST, {"q": "900000"})) == set()

    def test_query_count_does_not_grow_with_the_number_of_rows(
        self,
        admin_client: Client,
        django_assert_max_num_queries: DjangoAssertNumQueries,
    ) -> None:
        def mixed(count: int) -> None:
            JobFactory.create_batch(count // 3, dead=True, last_error="x\nValueError: boom")
            JobFactory.create_batch(count // 3, running=True)
            JobFactory.create_batch(count - 2 * (count // 3), queue="mail")

        admin_client.get(CHANGELIST)  # warm per-process caches (content types, templates)
        mixed(3)
        with CaptureQueriesContext(connection) as small:
            assert len(listed(admin_client.get(CHANGELIST))) == 3
        mixed(97)
        with django_assert_max_num_queries(len(small)) as big:
            assert len(listed(admin_client.get(CHANGELIST))) == 100
        logger.info(f"job list page: {len(small)} queries for 3 jobs, {len(big)} for 100 jobs")
        assert len(big) == len(small)


# --- detail page -----------------------------------------------------------------------------


class TestDetailPage:
    def test_has_no_add_permission(self, admin_client: Client) -> None:
        response = admin_client.get(reverse("admin:django_dbqueue_job_add"))
        assert response.status_code == 403
        assert (
            'href="/admin/django_dbqueue/job/add/"'
            not in admin_client.get(CHANGELIST).content.decode()
        )

    def test_has_no_save_button(self, admin_client: Client) -> None:
        response = admin_client.get(change_url(dead_job()))
        assert response.status_code == 200
        html = response.content.decode()
        assert 'name="_save"' not in html
        assert 'name="_continue"' not in html

    def test_posting_a_change_does_not_alter_lifecycle_fields(self, admin_client: Client) -> None:
        running = job(running=True, lease_token=7)
        admin_client.post(
            change_url(running),
            {"state": "ready", "lease_token": "0", "worker_id": "", "_save": "Save"},
        )
        running.refresh_from_db()
        assert (running.state, running.lease_token, running.worker_id) == (
            JobState.RUNNING,
            7,
            "w1",
        )

    def test_posting_the_change_form_writes_nothing_to_the_job(self, admin_client: Client) -> None:
        running = job(running=True, lease_token=7)
        with CaptureQueriesContext(connection) as queries:
            admin_client.post(change_url(running), {"_save": "Save"})
        writes = [q["sql"] for q in queries if q["sql"].startswith('UPDATE "dbqueue_job"')]
        assert writes == []

    def test_shows_arguments_as_formatted_json(self, admin_client: Client) -> None:
        shown = job(args=[1, "two"], kwargs={"copy": True, "note": "<b>"})
        html = admin_client.get(change_url(shown)).content.decode()
        formatted = json.dumps(
            {"args": [1, "two"], "kwargs": {"copy": True, "note": "<b>"}}, indent=2, sort_keys=True
        )
        assert f"<pre>{escape(formatted)}</pre>" in html

    def test_shows_error_history_rows_with_traceback_in_details(self, admin_client: Client) -> None:
        dead = dead_job(attempts=3, max_attempts=3)
        html = admin_client.get(change_url(dead)).content.decode()
        history = re.search(r"<th>attempt</th>.*?</tbody>", html, re.DOTALL)
        assert history is not None
        rows = re.findall(r"<tr><td>(\d+)</td><td>w1</td>", history.group())
        assert rows == ["1", "2", "3"]
        assert (
            history.group().count(
                f"<details><summary>traceback</summary><pre>{escape(TRACEBACK)}</pre></details>"
            )
            == 3
        )

    def test_links_the_subject_to_its_admin_page(self, admin_client: Client) -> None:
        order = Order.objects.create()
        enqueued = tasks.send_invoice.using(subject=order).enqueue(1)
        html = admin_client.get(change_url(enqueued)).content.decode()
        assert (
            f'<a href="/admin/testapp/order/{order.pk}/change/">testapp.order {order.pk}</a>'
            in (html)
        )

    def test_shows_the_timeline(self, admin_client: Client) -> None:
        def at(hour: int) -> datetime:
            return datetime(2025, 3, 1, hour, 15, tzinfo=dt_timezone.utc)

        finished = job(
            succeeded=True,
            created_at=at(8),
            run_at=at(9),
            started_at=at(10),
            finished_at=at(11),
        )
        html = admin_client.get(change_url(finished)).content.decode()
        assert ">Timeline</" in html
        for field in ("created_at", "run_at", "started_at", "finished_at"):
            value = getattr(finished, field)
            shown = formats.localize(timezone.localtime(value))
            block = re.search(rf'field-{field}\b.*?<div class="readonly">(.*?)</div>', html, re.S)
            assert block is not None, field
            assert block.group(1) == shown, field


# --- actions ---------------------------------------------------------------------------------


@pytest.fixture
def mixed() -> dict[str, Job]:
    """One job in each state an operator meets, plus a ready job scheduled for later."""
    return {
        "dead": dead_job(),
        "ready": job(last_error_code="ConnectionError", last_error="ConnectionError: retrying"),
        "later": job(run_at=timezone.now() + timedelta(hours=1)),
        "running": job(running=True),
        "succeeded": job(succeeded=True),
    }


def assert_logged(jobs: Iterable[Job], user: User, flag: int, verb: str) -> None:
    for logged in jobs:
        (entry,) = log_entries(logged)
        assert (entry.user_id, entry.action_flag) == (user.pk, flag)
        assert verb in entry.change_message


def assert_not_logged(jobs: Iterable[Job]) -> None:
    for skipped in jobs:
        assert log_entries(skipped) == []


class TestRequeueDead:
    def test_select_all_requeues_every_dead_job_the_page_listed(self, admin_client: Client) -> None:
        dead = [dead_job(), dead_job(), dead_job()]
        page = post_action(admin_client, "requeue_dead", dead[:1], select_across="1")
        fields = confirmation_fields(page)
        assert fields["select_across"] == ["1"]
        assert fields["_selected_action"] == [str(dead[0].pk)]
        admin_client.post(CHANGELIST, {**fields, "extra_attempts": "1"})
        assert [state_of(each) for each in dead] == [JobState.READY] * 3

    def test_select_all_past_the_upload_field_limit_requeues_the_filtered_jobs_in_batches(
        self,
        admin_client: Client,
        settings: Settings,
        monkeypatch: pytest.MonkeyPatch,
        django_assert_max_num_queries: DjangoAssertNumQueries,
    ) -> None:
        settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 40
        monkeypatch.setattr(admin_module, "ACTION_BATCH", 25)
        mail = JobFactory.create_batch(120, dead=True, queue="mail")
        other = JobFactory.create_batch(3, dead=True, queue="default")
        listing = f"{CHANGELIST}?queue__exact=mail"
        page = admin_client.post(
            listing,
            {
                "action": "requeue_dead",
                "_selected_action": [str(mail[0].pk)],
                "index": "0",
                "select_across": "1",
            },
        )
        assert page.status_code == 200
        fields = confirmation_fields(page)
        with django_assert_max_num_queries(60):
            done = admin_client.post(listing, {**fields, "extra_attempts": "2"})
        assert done.status_code == 302
        assert messages_of(done) == ["Requeued with 2 more attempt(s): 120 job(s)."]
        assert {state_of(j) for j in mail} == {JobState.READY}
        assert {state_of(j) for j in other} == {JobState.DEAD}
        assert sum(len(values) for values in fields.values()) < 10
        assert "120 dead job(s) will be ready again" in page.content.decode()
        assert len(page.context["jobs"]) == 100

    def test_confirmation_shows_the_exception_line_of_a_long_traceback(
        self, admin_client: Client
    ) -> None:
        frames = "".join(f'  File "deep.py", line {n}\n    f{n + 1}()\n' for n in range(40))
        long = dead_job()
        Job.objects.filter(pk=long.pk).update(
            last_error=f"Traceback (most recent call last):\n{frames}KeyError: 'sku-9'"
        )
        page = post_action(admin_client, "requeue_dead", [long]).content.decode()
        assert "KeyError: &#x27;sku-9&#x27;" in page

    def test_first_post_lists_only_the_selected_dead_jobs_and_their_last_errors(
        self, admin_client: Client, mixed: dict[str, Job]
    ) -> None:
        other_dead = dead_job("insufficient funds")
        response = post_action(admin_client, "requeue_dead", [*mixed.values(), other_dead])
        assert response.status_code == 200
        assert "admin/django_dbqueue/job/requeue_dead.html" in [t.name for t in response.templates]
        assert {j.pk for j in response.context["jobs"]} == {mixed["dead"].pk, other_dead.pk}
        html = response.content.decode()
        assert f"<td>{mixed['dead'].pk}</td>" in html
        assert f"<td>{other_dead.pk}</td>" in html
        for name in ("ready", "later", "running", "succeeded"):
            assert f"<td>{mixed[name].pk}</td>" not in html
        assert "card 4242 declined" in html
        assert "insufficient funds" in html
        assert "ConnectionError: retrying" not in html
        assert "4 selected job(s) are not dead and will be skipped" in html
        assert response.context["form"]["extra_attempts"].value() == 1
        assert re.search(r'<input type="number" name="extra_attempts" value="1"', html)
        assert state_of(mixed["dead"]) == JobState.DEAD

    def test_apply_makes_dead_jobs_ready_with_more_attempts_same_id_and_history(
        self, admin_client: Client, admin_user: User, mixed: dict[str, Job]
    ) -> None:
        dead = mixed["dead"]
        response = apply_requeue(admin_client, mixed.values(), extra_attempts="2")
        assert response.status_code == 302
        requeued = Job.objects.get(pk=dead.pk)
        assert requeued.state == JobState.READY
        assert (requeued.attempts, requeued.max_attempts) == (2, 4)
        assert requeued.errors == dead.errors
        assert requeued.last_error_code == "ValueError"
        assert requeued.finished_at is None
        assert requeued.run_at <= timezone.now()
        assert {name: state_of(j) for name, j in mixed.items() if name != "dead"} == {
            "ready": JobState.READY,
            "later": JobState.READY,
            "running": JobState.RUNNING,
            "succeeded": JobState.SUCCEEDED,
        }
        assert messages_of(response) == [
            "Requeued with 2 more attempt(s): 1 job(s). "
            "Skipped 4 whose state did not allow it (or changed meanwhile)."
        ]
        assert_logged([dead], admin_user, CHANGE, "Requeued")
        assert_not_logged(j for name, j in mixed.items() if name != "dead")

    def test_dead_jobs_sharing_a_dedupe_key_requeue_one_and_name_the_others(
        self, admin_client: Client
    ) -> None:
        first, second = dead_job(dedupe_key="invoice:7"), dead_job(dedupe_key="invoice:7")
        response = apply_requeue(admin_client, [first, second], extra_attempts="1")
        assert response.status_code == 302
        assert (state_of(first), state_of(second)) == (JobState.READY, JobState.DEAD)
        assert messages_of(response) == [
            "Requeued with 1 more attempt(s): 1 job(s). "
            "Skipped 1 whose state did not allow it (or changed meanwhile).",
            "Not requeued, because another job with the same task and dedupe key is "
            f"active or was requeued first: {second.pk}.",
        ]

    def test_invalid_extra_attempts_re_renders_the_page_and_changes_nothing(
        self, admin_client: Client, mixed: dict[str, Job]
    ) -> None:
        response = apply_requeue(admin_client, mixed.values(), extra_attempts="0")
        assert response.status_code == 200
        assert "admin/django_dbqueue/job/requeue_dead.html" in [t.name for t in response.templates]
        assert response.context["form"].errors["extra_attempts"]
        assert "Ensure this value is greater than or equal to 1." in response.content.decode()
        dead = Job.objects.get(pk=mixed["dead"].pk)
        assert (dead.state, dead.max_attempts) == (JobState.DEAD, 2)
        assert log_entries(dead) == []


class TestOtherActions:
    def test_cancel_ready_cancels_only_ready_jobs_and_reports_the_rest(
        self, admin_client: Client, admin_user: User, mixed: dict[str, Job]
    ) -> None:
        response = post_action(admin_client, "cancel_ready", mixed.values())
        assert response.status_code == 302
        assert {name: state_of(j) for name, j in mixed.items()} == {
            "dead": JobState.DEAD,
            "ready": JobState.CANCELLED,
            "later": JobState.CANCELLED,
            "running": JobState.RUNNING,
            "succeeded": JobState.SUCCEEDED,
        }
        assert messages_of(response) == [
            "Cancelled: 2 job(s). Skipped 3 whose state did not allow it (or changed meanwhile)."
        ]
        assert_logged([mixed["ready"], mixed["later"]], admin_user, CHANGE, "Cancelled")
        assert_not_logged([mixed["dead"], mixed["running"], mixed["succeeded"]])

    def test_run_now_moves_only_future_ready_jobs_to_now(
        self, admin_client: Client, admin_user: User, mixed: dict[str, Job]
    ) -> None:
        before = {name: j.run_at for name, j in mixed.items()}
        response = post_action(admin_client, "run_now", mixed.values())
        assert response.status_code == 302
        after = dict(
            Job.objects.filter(pk__in=[j.pk for j in mixed.values()]).values_list("pk", "run_at")
        )
        assert after[mixed["later"].pk] <= timezone.now()
        for name in ("dead", "ready", "running", "succeeded"):
            assert after[mixed[name].pk] == before[name], name
        assert {name: state_of(j) for name, j in mixed.items()} == {
            name: j.state for name, j in mixed.items()
        }
        assert messages_of(response) == [
            "Made due now: 1 job(s). Skipped 4 whose state did not allow it (or changed meanwhile)."
        ]
        assert_logged([mixed["later"]], admin_user, CHANGE, "Made due now")
        assert_not_logged(j for name, j in mixed.items() if name != "later")

    def test_delete_finished_deletes_only_terminal_jobs(
        self, admin_client: Client, admin_user: User, mixed: dict[str, Job]
    ) -> None:
        cancelled = job(cancelled=True)
        response = post_action(admin_client, "delete_finished", [*mixed.values(), cancelled])
        assert response.status_code == 302
        remaining = set(Job.objects.values_list("pk", flat=True))
        assert remaining == {mixed["ready"].pk, mixed["later"].pk, mixed["running"].pk}
        assert messages_of(response) == [
            "Deleted: 3 job(s). Skipped 3 whose state did not allow it (or changed meanwhile)."
        ]
        assert_logged(
            [mixed["dead"], mixed["succeeded"], cancelled], admin_user, DELETION, "Deleted"
        )
        assert_not_logged([mixed["ready"], mixed["later"], mixed["running"]])

    def test_request_cancel_marks_only_running_jobs_and_the_list_shows_the_mark(
        self, admin_client: Client, admin_user: User, mixed: dict[str, Job]
    ) -> None:
        response = post_action(admin_client, "request_cancel", mixed.values())
        assert response.status_code == 302
        marked = set(
            Job.objects.filter(cancel_requested_at__isnull=False).values_list("pk", flat=True)
        )
        assert marked == {mixed["running"].pk}
        assert state_of(mixed["running"]) == JobState.RUNNING
        assert messages_of(response) == [
            "Cancel requested: 1 job(s). "
            "Skipped 4 whose state did not allow it (or changed meanwhile)."
        ]
        assert_logged([mixed["running"]], admin_user, CHANGE, "Cancel requested")
        html = admin_client.get(CHANGELIST).content.decode()
        assert html.count('class="dbqueue-cancel-requested"') == 1

    def test_an_action_that_changes_nothing_warns(
        self, admin_client: Client, mixed: dict[str, Job]
    ) -> None:
        response = post_action(admin_client, "cancel_ready", [mixed["running"]])
        (message,) = get_messages(response.wsgi_request)
        assert message.tags == "warning"
        assert str(message) == (
            "Cancelled: 0 job(s). Skipped 1 whose state did not allow it (or changed meanwhile)."
        )


# --- permissions -----------------------------------------------------------------------------


class TestPermissions:
    def test_staff_without_requeue_permission_cannot_requeue(
        self, client: Client, django_user_model: type[User]
    ) -> None:
        client.force_login(staff_user(django_user_model, "operator", "view_job", "change_job"))
        dead = dead_job()
        assert "requeue_dead" not in action_names(client)
        assert "cancel_ready" in action_names(client)
        response = post_action(client, "requeue_dead", [dead])
        assert messages_of(response) == ["No action selected."]
        response = apply_requeue(client, [dead], extra_attempts="2")
        assert state_of(dead) == JobState.DEAD
        assert log_entries(dead) == []

    def test_staff_with_requeue_permission_can_requeue(
        self, client: Client, django_user_model: type[User]
    ) -> None:
        user = staff_user(django_user_model, "lead", "view_job", "change_job", "requeue_job")
        client.force_login(user)
        dead = dead_job()
        assert "requeue_dead" in action_names(client)
        assert post_action(client, "requeue_dead", [dead]).status_code == 200
        assert apply_requeue(client, [dead], extra_attempts="2").status_code == 302
        assert state_of(dead) == JobState.READY
        assert_logged([dead], user, CHANGE, "Requeued")

    def test_requeue_permission_alone_does_not_allow_changing_state(
        self, client: Client, django_user_model: type[User]
    ) -> None:
        client.force_login(staff_user(django_user_model, "auditor", "view_job", "requeue_job"))
        dead = dead_job()
        assert "requeue_dead" not in action_names(client)
        apply_requeue(client, [dead], extra_attempts="2")
        assert state_of(dead) == JobState.DEAD
        assert log_entries(dead) == []

    def test_staff_without_change_permission_cannot_cancel(
        self, client: Client, django_user_model: type[User]
    ) -> None:
        client.force_login(staff_user(django_user_model, "viewer", "view_job"))
        ready = job()
        assert "cancel_ready" not in action_names(client)
        post_action(client, "cancel_ready", [ready])
        assert state_of(ready) == JobState.READY
        assert log_entries(ready) == []


# --- deletion --------------------------------------------------------------------------------


def delete_url(job: Job) -> str:
    return reverse("admin:django_dbqueue_job_delete", args=[job.pk])


class TestDeletion:
    def test_site_wide_delete_selected_is_not_offered_and_deletes_nothing(
        self, admin_client: Client, mixed: dict[str, Job]
    ) -> None:
        assert "delete_selected" not in action_names(admin_client)
        post_action(admin_client, "delete_selected", mixed.values(), post="yes")
        assert set(Job.objects.values_list("pk", flat=True)) == {j.pk for j in mixed.values()}

    @pytest.mark.parametrize("name", ["ready", "later", "running"])
    def test_a_live_jobs_page_has_no_delete_and_its_delete_view_refuses(
        self, admin_client: Client, mixed: dict[str, Job], name: str
    ) -> None:
        live = mixed[name]
        assert delete_url(live) not in admin_client.get(change_url(live)).content.decode()
        assert admin_client.get(delete_url(live)).status_code == 403
        assert admin_client.post(delete_url(live), {"post": "yes"}).status_code == 403
        assert state_of(live) == live.state

    @pytest.mark.parametrize("name", ["dead", "succeeded"])
    def test_a_finished_jobs_page_deletes_it_and_logs_it(
        self, admin_client: Client, admin_user: User, mixed: dict[str, Job], name: str
    ) -> None:
        finished = mixed[name]
        assert delete_url(finished) in admin_client.get(change_url(finished)).content.decode()
        response = admin_client.post(delete_url(finished), {"post": "yes"})
        assert response.status_code == 302
        assert not Job.objects.filter(pk=finished.pk).exists()
        assert_logged([finished], admin_user, DELETION, "")


# --- the job's own page ----------------------------------------------------------------------


def triage_url(job: Job) -> str:
    return reverse("admin:django_dbqueue_job_triage", args=[job.pk])


def page_buttons(client: Client, job: Job) -> list[str]:
    """The triage actions the job's page offers, in order."""
    response = client.get(change_url(job))
    assert response.status_code == 200
    return re.findall(
        r'<input type="submit" value="[^"]*" class="default" name="(\w+)">',
        response.content.decode(),
    )


class TestJobPageButtons:
    def test_each_state_offers_the_actions_that_fit_it(
        self, admin_client: Client, mixed: dict[str, Job]
    ) -> None:
        marked = job(running=True, cancel_requested_at=timezone.now())
        assert {name: page_buttons(admin_client, j) for name, j in mixed.items()} == {
            "dead": ["requeue_dead"],
            "ready": ["cancel_ready"],
            "later": ["cancel_ready", "run_now"],
            "running": ["request_cancel"],
            "succeeded": [],
        }
        assert page_buttons(admin_client, marked) == []

    def test_requeue_on_the_page_grants_the_attempts_asked_and_is_logged(
        self, admin_client: Client, admin_user: User
    ) -> None:
        dead = dead_job(attempts=2, max_attempts=2)
        html = admin_client.get(change_url(dead)).content.decode()
        assert re.search(r'<input type="number" name="extra_attempts" value="1"', html)
        response = admin_client.post(
            triage_url(dead), {"action": "requeue_dead", "apply": "1", "extra_attempts": "3"}
        )
        assert response.status_code == 302
        assert response["Location"] == change_url(dead)
        requeued = Job.objects.get(pk=dead.pk)
        assert (requeued.state, requeued.max_attempts) == (JobState.READY, 5)
        assert messages_of(response) == ["Requeued with 3 more attempt(s): 1 job(s)."]
        assert_logged([dead], admin_user, CHANGE, "Requeued with 3 more attempt(s)")

    @pytest.mark.parametrize(
        ("name", "action", "verb"),
        [
            ("ready", "cancel_ready", "Cancelled"),
            ("later", "run_now", "Made due now"),
            ("running", "request_cancel", "Cancel requested"),
        ],
    )
    def test_the_other_buttons_run_their_action_on_this_job_only(
        self,
        admin_client: Client,
        admin_user: User,
        mixed: dict[str, Job],
        name: str,
        action: str,
        verb: str,
    ) -> None:
        before = {n: (j.state, j.run_at, j.cancel_requested_at) for n, j in mixed.items()}
        response = admin_client.post(triage_url(mixed[name]), {"action": action})
        assert response.status_code == 302
        after = {
            n: (j.state, j.run_at, j.cancel_requested_at)
            for n, j in ((n, Job.objects.get(pk=j.pk)) for n, j in mixed.items())
        }
        assert {n for n in mixed if after[n] != before[n]} == {name}
        assert messages_of(response) == [f"{verb}: 1 job(s)."]
        assert_logged([mixed[name]], admin_user, CHANGE, verb)

    def test_a_button_for_a_state_the_job_left_changes_nothing_and_warns(
        self, admin_client: Client, mixed: dict[str, Job]
    ) -> None:
        response = admin_client.post(
            triage_url(mixed["ready"]),
            {"action": "requeue_dead", "apply": "1", "extra_attempts": "1"},
        )
        assert response.status_code == 302
        assert state_of(mixed["ready"]) == JobState.READY
        assert messages_of(response) == [
            "Requeued with 1 more attempt(s): 0 job(s). "
            "Skipped 1 whose state did not allow it (or changed meanwhile)."
        ]

    def test_view_only_staff_see_no_buttons_and_cannot_post_them(
        self, client: Client, django_user_model: type[User], mixed: dict[str, Job]
    ) -> None:
        client.force_login(staff_user(django_user_model, "viewer", "view_job"))
        for each in mixed.values():
            assert page_buttons(client, each) == []
            assert 'id="dbqueue-triage"' not in client.get(change_url(each)).content.decode()
        for name, action in [
            ("ready", "cancel_ready"),
            ("running", "request_cancel"),
            ("later", "run_now"),
        ]:
            assert client.post(triage_url(mixed[name]), {"action": action}).status_code == 403
        dead = mixed["dead"]
        refused = client.post(
            triage_url(dead), {"action": "requeue_dead", "apply": "1", "extra_attempts": "1"}
        )
        assert refused.status_code == 403
        assert {state_of(j) for j in mixed.values()} == {j.state for j in mixed.values()}
        assert not Job.objects.filter(cancel_requested_at__isnull=False).exists()
        assert_not_logged(mixed.values())

    def test_requeue_needs_the_requeue_permission_on_the_page_too(
        self, client: Client, django_user_model: type[User]
    ) -> None:
        client.force_login(staff_user(django_user_model, "operator", "view_job", "change_job"))
        dead, ready = dead_job(), job()
        assert page_buttons(client, dead) == []
        assert page_buttons(client, ready) == ["cancel_ready"]
        refused = client.post(
            triage_url(dead), {"action": "requeue_dead", "apply": "1", "extra_attempts": "1"}
        )
        assert refused.status_code == 403
        assert state_of(dead) == JobState.DEAD

    def test_only_post_and_only_page_actions(self, admin_client: Client) -> None:
        finished = job(succeeded=True)
        assert admin_client.get(triage_url(finished)).status_code == 405
        response = admin_client.post(triage_url(finished), {"action": "delete_finished"})
        assert response.status_code == 403
        assert Job.objects.filter(pk=finished.pk).exists()
