# Workflows: the waiting state, the pending-dependency count and the dependency edges.
# The dedupe key is held by waiting jobs too (a waiting job will run): on PostgreSQL and
# SQLite the partial unique index is rebuilt with the new condition, on MySQL and MariaDB
# the generated column behind it (migration 0004). The edge table has no foreign keys
# (retention deletes edges with their jobs, dependencies.py says why). On PostgreSQL,
# dbqueue_awaited(job) tells the completion statement whether jobs wait for a job, read
# with a snapshot of its own (a VOLATILE PL/pgSQL function takes one per query it runs):
# taken after the completion holds the row lock, it sees an edge an enqueue committed
# while the statement was under way (sql/postgresql.sql, complete).

import django.db.models.deletion
from django.db import migrations, models

from django_dbqueue.migrations._vendor import run_on, run_on_mysql

POSTGRESQL_FORWARD = [
    """
    CREATE OR REPLACE FUNCTION dbqueue_awaited(job bigint) RETURNS boolean
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        RETURN EXISTS (
            SELECT 1 FROM dbqueue_dependency WHERE depends_on_id = job AND state = 'pending'
        );
    END
    $$
    """
]
POSTGRESQL_BACKWARD = ["DROP FUNCTION IF EXISTS dbqueue_awaited(bigint)"]

MYSQL_FORWARD = [
    "DROP INDEX dbqueue_job_active_dedupe_my ON dbqueue_job",
    "ALTER TABLE dbqueue_job DROP COLUMN active_dedupe_key",
    "ALTER TABLE dbqueue_job ADD COLUMN active_dedupe_key varchar(255) AS "
    "(CASE WHEN state IN ('waiting', 'ready', 'running') THEN dedupe_key END) VIRTUAL",
    "CREATE UNIQUE INDEX dbqueue_job_active_dedupe_my ON dbqueue_job (task, active_dedupe_key)",
]
MYSQL_BACKWARD = [
    "DROP INDEX dbqueue_job_active_dedupe_my ON dbqueue_job",
    "ALTER TABLE dbqueue_job DROP COLUMN active_dedupe_key",
    "ALTER TABLE dbqueue_job ADD COLUMN active_dedupe_key varchar(255) AS "
    "(CASE WHEN state IN ('ready', 'running') THEN dedupe_key END) VIRTUAL",
    "CREATE UNIQUE INDEX dbqueue_job_active_dedupe_my ON dbqueue_job (task, active_dedupe_key)",
]


class Migration(migrations.Migration):
    # One transaction on PostgreSQL and SQLite: enqueues wait for the new dedupe index
    # instead of finding none. MySQL cannot roll DDL back: its step runs outside one.

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("django_dbqueue", "0015_mysql_ready_keyed_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="Dependency",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("position", models.PositiveIntegerField()),
                (
                    "on_failure",
                    models.CharField(choices=[("cancel", "Cancel"), ("run", "Run")], max_length=8),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("resolved", "Resolved"),
                            ("failed", "Failed"),
                        ],
                        default="pending",
                        max_length=8,
                    ),
                ),
            ],
            options={
                "db_table": "dbqueue_dependency",
            },
        ),
        migrations.RemoveConstraint(
            model_name="job",
            name="dbqueue_job_state_valid",
        ),
        migrations.RemoveConstraint(
            model_name="job",
            name="dbqueue_job_finish_shape",
        ),
        migrations.RemoveConstraint(
            model_name="job",
            name="dbqueue_job_active_dedupe",
        ),
        migrations.AddField(
            model_name="job",
            name="pending_dependencies",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="job",
            name="state",
            field=models.CharField(
                choices=[
                    ("waiting", "Waiting"),
                    ("ready", "Ready"),
                    ("running", "Running"),
                    ("succeeded", "Succeeded"),
                    ("dead", "Dead"),
                    ("cancelled", "Cancelled"),
                ],
                default="ready",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("state__in", ["waiting", "ready", "running", "succeeded", "dead", "cancelled"])
                ),
                name="dbqueue_job_state_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("finished_at__isnull", False),
                        ("state__in", ("succeeded", "dead", "cancelled")),
                    ),
                    models.Q(
                        ("finished_at__isnull", True),
                        ("state__in", ("waiting", "ready", "running")),
                    ),
                    _connector="OR",
                ),
                name="dbqueue_job_finish_shape",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("pending_dependencies", 0),
                    models.Q(("state__in", ("ready", "running")), _negated=True),
                    _connector="OR",
                ),
                name="dbqueue_job_runs_with_no_pending_dependency",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("state", "waiting"), _negated=True),
                    ("pending_dependencies__gt", 0),
                    _connector="OR",
                ),
                name="dbqueue_job_waits_for_a_dependency",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("dedupe_key__isnull", False), ("state__in", ("waiting", "ready", "running"))
                ),
                fields=("task", "dedupe_key"),
                name="dbqueue_job_active_dedupe",
            ),
        ),
        migrations.AddField(
            model_name="dependency",
            name="depends_on",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                help_text="The job it waits for.",
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="dependent_edges",
                to="django_dbqueue.job",
            ),
        ),
        migrations.AddField(
            model_name="dependency",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                help_text="The job that waits.",
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="dependency_edges",
                to="django_dbqueue.job",
            ),
        ),
        migrations.AddIndex(
            model_name="dependency",
            index=models.Index(fields=["depends_on", "job"], name="dbqueue_dependency_on"),
        ),
        migrations.AddIndex(
            model_name="dependency",
            index=models.Index(
                condition=models.Q(("state", "failed")),
                fields=["job"],
                name="dbqueue_dependency_failed",
            ),
        ),
        migrations.AddConstraint(
            model_name="dependency",
            constraint=models.UniqueConstraint(
                fields=("job", "position"), name="dbqueue_dependency_job"
            ),
        ),
        migrations.AddConstraint(
            model_name="dependency",
            constraint=models.CheckConstraint(
                condition=models.Q(("state__in", ["pending", "resolved", "failed"])),
                name="dbqueue_dependency_state_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="dependency",
            constraint=models.CheckConstraint(
                condition=models.Q(("on_failure__in", ["cancel", "run"])),
                name="dbqueue_dependency_on_failure_valid",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "waiting")),
                fields=["id"],
                include=("queue", "task"),
                name="dbqueue_job_waiting",
            ),
        ),
        migrations.RunPython(
            run_on_mysql(MYSQL_FORWARD), run_on_mysql(MYSQL_BACKWARD), atomic=False
        ),
        migrations.RunPython(
            run_on("postgresql", POSTGRESQL_FORWARD), run_on("postgresql", POSTGRESQL_BACKWARD)
        ),
    ]
