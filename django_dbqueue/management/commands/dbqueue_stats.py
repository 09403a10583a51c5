"""``manage.py dbqueue_stats``: queue health, limit load and the job table's bloat in the
terminal, as tables or JSON."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError, connections
from django.utils import timezone

from django_dbqueue import clock, conf
from django_dbqueue.management.options import INTERVAL
from django_dbqueue.stats import LimitStats, QueueStats, as_json, limit_stats, queue_stats
from django_dbqueue.table_health import HistoryTables, TableHealth, VacuumHorizon, table_health

COLUMNS = (
    "queue",
    "waiting",
    "ready",
    "scheduled",
    "running",
    "expiring",
    "dead",
    "blocked",
    "succeeded/1h",
    "oldest ready",
    "paused",
)
#: The columns of the limits table, below the queues' (when a limit has ready or running jobs).
LIMIT_COLUMNS = ("limit", "size", "rate", "running", "waiting")
#: The columns of the job table's line, last (PostgreSQL only).
TABLE_COLUMNS = ("table", "live rows", "dead rows", "dead", "last vacuum")
#: The columns read as text, left-aligned; the counts between them are right-aligned.
TEXT_COLUMNS = {"queue", "oldest ready", "paused", "limit", "table", "last vacuum"}
#: A pause ending within this long shows its time of day alone (the next one); a later end
#: shows its date too.
TIME_OF_DAY_WITHIN = timedelta(days=1)
STALE = "!"
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def humanise(seconds: float | None) -> str:
    """``4m12s``, ``2h05m``, ``3d04h``; ``-`` when there is nothing to age."""
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def is_stale(queue: QueueStats, warning: float) -> bool:
    """Whether the oldest ready job waited past ``warning`` although the queue is not paused
    (a pause is why its jobs wait, not a missing worker)."""
    age = queue.oldest_ready_age_seconds
    return not queue.paused and age is not None and age > warning


def paused(queue: QueueStats, now: datetime) -> str:
    """``yes`` (until resumed), ``until 14:05:00Z``, ``until 2025-03-08 14:05:00Z`` (a day or
    more ahead of ``now``), or blank for a queue that is not paused."""
    if not queue.paused:
        return ""
    if queue.paused_until is None:
        return "yes"
    until = clock.as_utc(queue.paused_until)
    shown = "%H:%M:%SZ" if until - now < TIME_OF_DAY_WITHIN else "%Y-%m-%d %H:%M:%SZ"
    return f"until {until:{shown}}"


def table(stats: dict[str, QueueStats], warning: float) -> str:
    """One row per queue, numbers right-aligned, in ``COLUMNS`` order; a footnote explains ``!``."""
    if not stats:
        return "No queue has waiting, ready, running, dead, blocked or recently succeeded jobs."
    now = timezone.now()
    rows = [
        [
            name,
            *(
                str(value)
                for value in (
                    queue.waiting,
                    queue.ready,
                    queue.scheduled,
                    queue.running,
                    queue.expiring,
                    queue.dead,
                    queue.blocked,
                    queue.succeeded_last_hour,
                )
            ),
            humanise(queue.oldest_ready_age_seconds)
            + (f" {STALE}" if is_stale(queue, warning) else ""),
            paused(queue, now),
        ]
        for name, queue in stats.items()
    ]
    lines = aligned(COLUMNS, rows)
    if any(is_stale(queue, warning) for queue in stats.values()):
        lines.append(
            f"{STALE} the oldest ready job has waited longer than OLDEST_READY_WARNING "
            f"({humanise(warning)}): is a worker serving that queue, with enough slots?"
        )
    return "\n".join(lines)


def limits_table(limits: list[LimitStats]) -> str:
    """One row per limit, in ``LIMIT_COLUMNS`` order; empty text when there is none."""
    if not limits:
        return ""
    rows = [
        [
            limit.limit,
            "-" if limit.size is None else str(limit.size),
            limit.pace,
            str(limit.running),
            str(limit.waiting),
        ]
        for limit in limits
    ]
    return "\n".join(aligned(LIMIT_COLUMNS, rows))


def table_health_table(health: TableHealth | None) -> str:
    """The job table's live and dead rows and last vacuum, in ``TABLE_COLUMNS`` order, then
    what holds back vacuum, if anything; empty text where not measured (not PostgreSQL)."""
    if health is None:
        return ""
    age = health.last_vacuum_age_seconds
    vacuumed = "never" if age is None else f"{humanise(age)} ago"
    row = [
        health.table,
        str(health.live_rows),
        str(health.dead_rows),
        f"{health.dead_share:.0%}",
        vacuumed,
    ]
    lines = aligned(TABLE_COLUMNS, [row])
    if health.horizon is not None:
        lines.append(f"vacuum held back by {holder(health.horizon)}")
    lines.append(history_line(health.history))
    return "\n".join(lines)


def history_line(history: HistoryTables) -> str:
    """``history: 3 tables, 12.0 MB, oldest from 2026-12-02`` (the tables finished jobs
    moved to; the oldest is that of succeeded jobs)."""
    line = f"history: {history.tables} tables, {history.bytes / 1e6:.1f} MB"
    if history.oldest_day is not None:
        line += f", oldest from {history.oldest_day.isoformat()}"
    return line


def holder(horizon: VacuumHorizon) -> str:
    """``session pid 4242 (psql, idle in transaction), 1532 transactions old, open 4m12s``."""
    who = horizon.kind if horizon.pid is None else f"{horizon.kind} pid {horizon.pid}"
    about = ", ".join(filter(None, [horizon.holder, horizon.state]))
    held = f"{horizon.transactions} transactions old"
    if horizon.seconds is not None:
        held += f", open {humanise(horizon.seconds)}"
    return f"{who} ({about}), {held}" if about else f"{who}, {held}"


def aligned(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    """The header and ``rows`` as lines, each column as wide as its widest cell; text cells
    (``TEXT_COLUMNS``) left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in [list(columns), *rows]) for i in range(len(columns))]
    return [
        "  ".join(
            cell.ljust(width) if column in TEXT_COLUMNS else cell.rjust(width)
            for column, cell, width in zip(columns, row, widths, strict=True)
        ).rstrip()
        for row in [list(columns), *rows]
    ]


class Command(BaseCommand):
    help = (
        "Show each queue's health: waiting (for the jobs they depend on), ready (due), "
        "scheduled, running, leases expiring within 30 s, dead, blocked (cancelled by a failed "
        "dependency), succeeded in the last hour, the oldest ready job's age, and whether the "
        "queue is paused (yes: until resumed; or until when). Then each limit with ready or "
        "running jobs: its size, its rate, its running jobs and its ready jobs waiting on it. "
        "Last, on PostgreSQL, the job table's live and dead rows, its last vacuum, and the "
        "oldest snapshot holding back vacuum."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--json",
            action="store_true",
            dest="json_output",
            help=(
                'Print {"queues": {name: {...}}, "limits": [{...}, ...], "table": {...}} for '
                "scripts (one line per refresh with --watch)."
            ),
        )
        parser.add_argument(
            "--watch",
            type=INTERVAL,
            metavar="N",
            help="Refresh every N seconds until Ctrl-C.",
        )

    def handle(self, *args: Any, json_output: bool, watch: float | None, **options: Any) -> None:
        if watch is None:
            self.stdout.write(self.render(json_output, indent=2))
            return
        try:
            while True:
                self.refresh(json_output, watch)
                time.sleep(watch)
        except KeyboardInterrupt:
            return

    def render(self, json_output: bool, indent: int | None) -> str:
        stats, limits, health = queue_stats(), limit_stats(), table_health()
        if json_output:
            return json.dumps(as_json(stats, limits, health), indent=indent, sort_keys=True)
        queues = table(stats, conf.get().oldest_ready_warning)
        return "\n\n".join(filter(None, [queues, limits_table(limits), table_health_table(health)]))

    def refresh(self, json_output: bool, every: float) -> None:
        """Print the stats once more; a database error is shown and retried next time."""
        try:
            output = self.render(json_output, indent=None)
        except DatabaseError as exc:
            connections[conf.get().reads_from].close()
            self.stderr.write(f"database error, retrying in {every:g}s: {exc}")
            return
        if json_output:
            self.stdout.write(output)
            return
        if self.stdout.isatty():
            self.stdout.write(CLEAR_SCREEN, ending="")
        now = timezone.localtime().strftime("%Y-%m-%d %H:%M:%S %Z")
        self.stdout.write(f"{now}  every {every:g}s, Ctrl-C to stop\n{output}\n")
