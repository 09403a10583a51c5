# The table of paused queues (pauses.py): one row per queue workers do not claim from.
# On MySQL and MariaDB it takes the server's binary NO PAD collation, as the other tables
# of the app do (migration 0009): the claim compares its queue names with the jobs'. On
# PostgreSQL, dbqueue_paused_queues(at) lists the queues paused at that time, read with a
# snapshot of its own (a VOLATILE PL/pgSQL function takes one per query it runs): the claim
# calls it after reading its clock for started_at, so it sees a pause that committed while
# the claim statement was under way (sql/postgresql.sql, claim).

from django.db import migrations, models

from django_dbqueue.migrations._vendor import exact_collation_of, run_on

POSTGRESQL_FORWARD = [
    """
    CREATE OR REPLACE FUNCTION dbqueue_paused_queues(at timestamptz) RETURNS text[]
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        RETURN ARRAY(
            SELECT queue FROM dbqueue_queue_pause WHERE until IS NULL OR until > at
        );
    END
    $$
    """
]
POSTGRESQL_BACKWARD = ["DROP FUNCTION IF EXISTS dbqueue_paused_queues(timestamptz)"]


class Migration(migrations.Migration):
    # MySQL cannot roll DDL back; Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [("django_dbqueue", "0016_workflows")]

    operations = [
        migrations.CreateModel(
            name="QueuePause",
            fields=[
                ("queue", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("paused_at", models.DateTimeField()),
                (
                    "until",
                    models.DateTimeField(
                        blank=True,
                        help_text="When the queue resumes by itself; empty: never.",
                        null=True,
                    ),
                ),
                (
                    "paused_by",
                    models.CharField(
                        blank=True,
                        help_text="Who paused it: a user, or the command.",
                        max_length=150,
                    ),
                ),
            ],
            options={"db_table": "dbqueue_queue_pause"},
        ),
        migrations.RunPython(exact_collation_of("dbqueue_queue_pause"), migrations.RunPython.noop),
        migrations.RunPython(
            run_on("postgresql", POSTGRESQL_FORWARD), run_on("postgresql", POSTGRESQL_BACKWARD)
        ),
    ]
