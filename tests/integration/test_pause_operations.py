"""Paused queues where operators look: ``queue_stats``, ``dbqueue_stats``, the
``dbqueue_queue_paused`` gauge, and the admin's queue health table with its Pause and
Resume buttons (permission, CSRF, admin log, no write for bad input)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from io import StringIO
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages import get_messages
from django.core.management import call_command
from django.test import Client
from django.urls import resolve, reverse
from django.utils import timezone
from pytest_django.fixtures import Settings

from django_dbqueue import leases, pauses
from django_dbqueue.management.commands.dbqueue_stats import paused
from django_dbqueue.models import QueuePause
from django_dbqueue.stats import QueueStats, as_json, queue_stats
from tests.factories import JobFactory
from tests.scraping import scrape

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_dbqueue/job/"
PAUSE_URL = reverse("admin:django_dbqueue_job_pause_queue")
RESUME_URL = reverse("admin:django_dbqueue_job_resume_queue")
#: How far the database clock (which stamps a pause) may be from this test's clock.
CLOCK_SLACK = timedelta(seconds=5)
NOON = datetime(2025, 3, 1, 12, 0, tzinfo=dt_timezone.utc)


# --- helpers ---------------------------------------------------------------------------------


def staff_user(django_user_model: type[User], username: str, *codenames: str) -> User:
    user: User = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_dbqueue", codename__in=codenames)
    )
    return user


def messages_of(response: Response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def pause_entries(queue: str) -> list[LogEntry]:
    return list(
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(QueuePause), object_id=queue
        ).order_by("pk")
    )


def paused_queues() -> dict[str, QueuePause]:
    return {pause.queue: pause for pause in QueuePause.objects.all()}


def stats_output(*args: str) -> str:
    out = StringIO()
    call_command("dbqueue_stats", *args, stdout=out)
    return out.getvalue()


def table_line(output: str, queue: str) -> str:
    (line,) = [line for line in output.splitlines() if line.split()[:1] == [queue]]
    return line


def close_to(moment: datetime | None, expected: datetime) -> bool:
    return moment is not None and abs(moment - expected) < CLOCK_SLACK


def health_row(html: str, queue: str) -> str:
    """The health table's ``<tr>`` of ``queue``, as HTML."""
    rows = re.findall(r'<tr class="dbqueue-queue[^"]*".*?</tr>', html, re.DOTALL)
    (row,) = [row for row in rows if f'?queue__exact={queue}">{queue}</a>' in row]
    return row


# --- queue_stats -----------------------------------------------------------------------------


class TestQueueStats:
    def test_a_paused_queue_without_jobs_is_listed_with_zero_counts(self) -> None:
        JobFactory(queue="mail")
        pauses.pause(["idle"])
        stats = queue_stats()
        assert sorted(stats) == ["idle", "mail"]
        assert stats["idle"] == QueueStats(0, 0, 0, 0, 0, 0, None, paused=True)
        assert (stats["mail"].paused, stats["mail"].paused_until) == (False, None)

    def test_a_paused_queue_keeps_its_counts_and_says_until_when(self) -> None:
        JobFactory.create_batch(2, queue="mail")
        pauses.pause(["mail"], seconds=600)
        mail = queue_stats()["mail"]
        assert (mail.ready, mail.paused) == (2, True)
        assert close_to(mail.paused_until, timezone.now() + timedelta(seconds=600))

    def test_a_pause_that_has_ended_or_was_resumed_is_not_shown(self) -> None:
        JobFactory(queue="mail")
        now = timezone.now()
        QueuePause.objects.create(queue="mail", paused_at=now - timedelta(hours=1), until=now)
        QueuePause.objects.create(queue="ended", paused_at=now - timedelta(hours=1), until=now)
        pauses.pause(["resumed"])
        pauses.resume(["resumed"])
        stats = queue_stats()
        assert sorted(stats) == ["mail"]
        assert stats["mail"].paused is False

    def test_json_carries_paused_and_paused_until_in_utc(self) -> None:
        pauses.pause(["forever"])
        (timed,) = pauses.pause(["timed"], seconds=3600)
        assert timed.until is not None
        queues = json.loads(json.dumps(as_json(queue_stats())))["queues"]
        assert (queues["forever"]["paused"], queues["forever"]["paused_until"]) == (True, None)
        assert queues["timed"]["paused"] is True
        until = datetime.fromisoformat(queues["timed"]["paused_until"])
        assert until.utcoffset() == timedelta(0)
        assert until == timed.until


# --- dbqueue_stats ---------------------------------------------------------------------------


class TestStatsCommand:
    def test_table_has_a_paused_column(self) -> None:
        JobFactory(queue="mail")
        pauses.pause(["idle"])
        pauses.pause(["soon"], seconds=600)
        pauses.pause(["later"], seconds=7 * 86400)
        output = stats_output()
        assert output.splitlines()[0].split()[-1] == "paused"
        assert table_line(output, "idle").endswith("  yes")
        assert re.search(r"  until \d\d:\d\d:\d\dZ$", table_line(output, "soon"))
        assert re.search(r"  until \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$", table_line(output, "later"))
        assert not table_line(output, "mail").endswith(("yes", "Z"))

    def test_the_paused_cell_shows_the_time_of_day_within_a_day_and_the_date_after(self) -> None:
        until = datetime(2025, 3, 1, 14, 5, tzinfo=dt_timezone.utc)
        queue = QueueStats(0, 0, 0, 0, 0, 0, None, paused=True, paused_until=until)
        assert paused(queue, NOON) == "until 14:05:00Z"
        assert paused(queue, NOON - timedelta(days=2)) == "until 2025-03-01 14:05:00Z"
        assert paused(QueueStats(0, 0, 0, 0, 0, 0, None, paused=True), NOON) == "yes"
        assert paused(QueueStats(0, 0, 0, 0, 0, 0, None), NOON) == ""

    def test_a_paused_queue_is_not_flagged_stale(self, settings: Settings) -> None:
        settings.DBQUEUE = {"OLDEST_READY_WARNING": 60}
        JobFactory(queue="mail", run_at=timezone.now() - timedelta(minutes=10))
        JobFactory(queue="held", run_at=timezone.now() - timedelta(minutes=10))
        pauses.pause(["held"])
        output = stats_output()
        assert "10m00s !" in table_line(output, "mail")
        assert "!" not in table_line(output, "held")

    def test_json_carries_the_pause(self) -> None:
        pauses.pause(["idle"])
        queues = json.loads(stats_output("--json"))["queues"]
        assert queues == as_json(queue_stats())["queues"]
        assert (queues["idle"]["paused"], queues["idle"]["paused_until"]) == (True, None)


# --- the dbqueue_queue_paused gauge ----------------------------------------------------------


@pytest.mark.urls("tests.metrics_urls")
@pytest.mark.usefixtures("fresh_view_cache")
class TestPausedGauge:
    def test_one_for_paused_queues_zero_for_the_others(self, client: Client) -> None:
        JobFactory(queue="mail")
        JobFactory(queue="held")
        pauses.pause(["held"], seconds=600)
        pauses.pause(["idle"])
        samples = scrape(client, "queue")
        assert {
            queue: samples[("dbqueue_queue_paused", queue)] for queue in ("mail", "held", "idle")
        } == {"mail": 0, "held": 1, "idle": 1}
        assert samples[("dbqueue_queue_ready_jobs", "held")] == 1
        assert samples[("dbqueue_queue_ready_jobs", "idle")] == 0

    def test_configured_queues_without_jobs_or_pause_report_zero(
        self, client: Client, settings: Settings
    ) -> None:
        settings.DBQUEUE = {"QUEUES": ["default", "mail"]}
        pauses.pause(["mail"])
        samples = scrape(client, "queue")
        assert samples[("dbqueue_queue_paused", "default")] == 0
        assert samples[("dbqueue_queue_paused", "mail")] == 1

    def test_has_help_text_and_is_a_gauge(self, client: Client) -> None:
        pauses.pause(["idle"])
        text = client.get("/metrics").content.decode()
        assert "# HELP dbqueue_queue_paused 1 while the queue is paused" in text
        assert "# TYPE dbqueue_queue_paused gauge" in text


# --- the admin's health table: Pause and Resume ----------------------------------------------


@pytest.fixture
def operator(client: Client, django_user_model: type[User]) -> Client:
    """Staff who may view and change jobs: the ones the job actions are offered to."""
    client.force_login(staff_user(django_user_model, "operator", "view_job", "change_job"))
    return client


@pytest.fixture
def viewer(client: Client, django_user_model: type[User]) -> Client:
    client.force_login(staff_user(django_user_model, "viewer", "view_job"))
    return client


class TestHealthTable:
    def test_shows_a_paused_queue_without_jobs_and_until_when(self, operator: Client) -> None:
        JobFactory(queue="mail")
        pauses.pause(["idle"])
        (held,) = pauses.pause(["held"], seconds=600)
        assert held.until is not None
        html = operator.get(CHANGELIST).content.decode()
        idle = health_row(html, "idle")
        assert "dbqueue-paused" in idle
        assert "<strong>paused</strong> until resumed" in idle
        until = timezone.localtime(held.until).strftime("%Y-%m-%d %H:%M:%S")
        assert f"<strong>paused</strong> until {until} UTC" in health_row(html, "held")
        assert "dbqueue-paused" not in health_row(html, "mail")

    def test_operator_sees_pause_on_running_queues_and_resume_on_paused_ones(
        self, operator: Client
    ) -> None:
        JobFactory(queue="mail")
        pauses.pause(["idle"])
        html = operator.get(CHANGELIST).content.decode()
        mail, idle = health_row(html, "mail"), health_row(html, "idle")
        assert f'action="{PAUSE_URL}"' in mail
        assert 'name="csrfmiddlewaretoken"' in mail
        assert re.findall(r'<option value="(\d*)">', mail) == ["", "600", "3600", "86400"]
        assert f'action="{RESUME_URL}"' not in mail
        assert f'action="{RESUME_URL}"' in idle
        assert f'action="{PAUSE_URL}"' not in idle

    def test_view_only_staff_see_the_pause_but_no_buttons(self, viewer: Client) -> None:
        JobFactory(queue="mail")
        pauses.pause(["idle"])
        response = viewer.get(CHANGELIST)
        assert response.status_code == 200
        html = response.content.decode()
        assert "<strong>paused</strong> until resumed" in health_row(html, "idle")
        assert PAUSE_URL not in html
        assert RESUME_URL not in html

    def test_a_paused_queue_is_not_flagged_stale(
        self, operator: Client, settings: Settings
    ) -> None:
        settings.DBQUEUE = {"OLDEST_READY_WARNING": 60}
        JobFactory(queue="mail", run_at=timezone.now() - timedelta(minutes=10))
        pauses.pause(["mail"])
        row = health_row(operator.get(CHANGELIST).content.decode(), "mail")
        assert "dbqueue-stale" not in row
        assert "older than" not in row


class TestPauseButton:
    def test_pauses_until_resumed_and_logs_it(self, operator: Client) -> None:
        response = operator.post(PAUSE_URL, {"queue": "mail", "period": ""})
        assert response.status_code == 302
        assert response["Location"] == CHANGELIST
        assert messages_of(response) == [
            "Queue mail paused: workers claim none of its jobs until you resume it."
        ]
        pause = paused_queues()["mail"]
        assert (pause.until, pause.paused_by) == (None, "operator")
        (entry,) = pause_entries("mail")
        assert (entry.action_flag, entry.user.get_username()) == (CHANGE, "operator")
        assert entry.change_message == "Paused until resumed (admin)"
        assert entry.object_repr == "mail paused"

    def test_pauses_for_a_chosen_period(self, operator: Client) -> None:
        response = operator.post(PAUSE_URL, {"queue": "mail", "period": "3600"})
        until = paused_queues()["mail"].until
        assert close_to(until, timezone.now() + timedelta(hours=1))
        assert until is not None
        shown = timezone.localtime(until).strftime("%Y-%m-%d %H:%M:%S")
        assert messages_of(response) == [
            f"Queue mail paused: workers claim none of its jobs until {shown} UTC."
        ]
        (entry,) = pause_entries("mail")
        assert entry.change_message.startswith("Paused until 20")
        assert datetime.fromisoformat(entry.change_message.split()[2]) == until

    def test_pausing_a_paused_queue_sets_its_end_anew(self, operator: Client) -> None:
        operator.post(PAUSE_URL, {"queue": "mail", "period": "600"})
        operator.post(PAUSE_URL, {"queue": "mail", "period": ""})
        assert paused_queues()["mail"].until is None
        assert len(pause_entries("mail")) == 2

    @pytest.mark.postgresql  # the claim SQL of the other vendors is being reworked meanwhile
    def test_workers_claim_none_of_its_jobs_until_resumed(self, operator: Client) -> None:
        job = JobFactory(queue="mail")
        operator.post(PAUSE_URL, {"queue": "mail", "period": ""})
        assert leases.claim(["mail"], "w1", 10) == []
        operator.post(RESUME_URL, {"queue": "mail"})
        assert [lease.job_id for lease in leases.claim(["mail"], "w1", 10)] == [job.pk]

    @pytest.mark.parametrize(
        ("data", "reason"),
        [
            ({"queue": "mail", "period": "5"}, "Select a valid choice. 5 is not one of"),
            ({"queue": "mail", "period": "forever"}, "Select a valid choice."),
            ({"queue": "no spaces", "period": ""}, "Queue name 'no spaces' is invalid"),
            ({"queue": "x" * 101, "period": ""}, "is invalid: use 1-100 letters"),
            ({"period": ""}, "This field is required."),
        ],
    )
    def test_bad_input_writes_nothing_and_says_why(
        self, operator: Client, data: dict[str, str], reason: str
    ) -> None:
        response = operator.post(PAUSE_URL, data)
        assert response.status_code == 302
        (message,) = messages_of(response)
        assert message.startswith("No queue was paused: ")
        assert reason in message
        assert paused_queues() == {}
        assert not LogEntry.objects.exists()


class TestResumeButton:
    def test_resumes_and_logs_it(self, operator: Client) -> None:
        pauses.pause(["mail"])
        response = operator.post(RESUME_URL, {"queue": "mail"})
        assert response.status_code == 302
        assert messages_of(response) == ["Queue mail resumed: workers claim its jobs again."]
        assert paused_queues() == {}
        (entry,) = pause_entries("mail")
        assert (entry.action_flag, entry.change_message) == (DELETION, "Resumed (admin)")
        assert entry.user.get_username() == "operator"

    def test_a_queue_that_was_not_paused_is_reported_and_not_logged(self, operator: Client) -> None:
        pauses.pause(["other"])
        response = operator.post(RESUME_URL, {"queue": "mail"})
        assert messages_of(response) == ["Queue mail was not paused; nothing changed."]
        assert list(paused_queues()) == ["other"]
        assert not LogEntry.objects.exists()

    def test_bad_input_writes_nothing_and_says_why(self, operator: Client) -> None:
        pauses.pause(["mail"])
        response = operator.post(RESUME_URL, {"queue": "mail;all"})
        (message,) = messages_of(response)
        assert message.startswith("No queue was resumed: Queue name 'mail;all' is invalid")
        assert list(paused_queues()) == ["mail"]
        assert not LogEntry.objects.exists()


class TestRefusals:
    @pytest.mark.parametrize("url", [PAUSE_URL, RESUME_URL])
    def test_get_is_not_allowed_and_changes_nothing(self, operator: Client, url: str) -> None:
        pauses.pause(["held"])
        assert operator.get(url, {"queue": "mail"}).status_code == 405
        assert operator.get(url, {"queue": "held"}).status_code == 405
        assert list(paused_queues()) == ["held"]
        assert not LogEntry.objects.exists()

    @pytest.mark.parametrize("url", [PAUSE_URL, RESUME_URL])
    def test_staff_who_may_not_change_jobs_are_refused(self, viewer: Client, url: str) -> None:
        pauses.pause(["held"])
        for queue in ("mail", "held"):
            assert viewer.post(url, {"queue": queue, "period": ""}).status_code == 403
        assert list(paused_queues()) == ["held"]
        assert not LogEntry.objects.exists()

    def test_anonymous_users_are_sent_to_log_in(self, client: Client) -> None:
        response = client.post(PAUSE_URL, {"queue": "mail", "period": ""})
        assert response.status_code == 302
        assert "/login/" in response["Location"]
        assert paused_queues() == {}

    def test_a_post_without_the_csrf_token_is_refused(self, django_user_model: type[User]) -> None:
        strict = Client(enforce_csrf_checks=True)
        strict.force_login(staff_user(django_user_model, "operator", "view_job", "change_job"))
        assert strict.post(PAUSE_URL, {"queue": "mail", "period": ""}).status_code == 403
        assert paused_queues() == {}

    @pytest.mark.parametrize("url", [PAUSE_URL, RESUME_URL])
    def test_views_run_outside_atomic_requests_on_every_database(
        self, url: str, settings: Settings
    ) -> None:
        view: Any = resolve(url).func
        assert view._non_atomic_requests == set(settings.DATABASES)
