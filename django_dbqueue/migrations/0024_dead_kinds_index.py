# Hand-written: an index of the dead jobs by queue, task and last error code (issue 31, admin
# pages at 10 M jobs). The admin's health summary counts dead jobs per queue and its queue,
# task and error-code filters list their values, from one grouped read of the dead jobs
# (dead_jobs.counts). dbqueue_job_dead (0006) is in id order for the dead-letter list, so that
# read hashed every dead job's three values on each page: 22-39 ms with 100,000 dead jobs.
# In this index's order the grouping streams: 9 ms, and the index is small (750 kB there:
# equal keys share an entry).
#
# On PostgreSQL the index is built CONCURRENTLY (as in 0013): a big job table takes enqueues
# and claims all the while; a build that was interrupted leaves an invalid index, which
# running the migration again drops first. It is built on dbqueue_job and on the history
# table of dead and cancelled jobs (0023), named as LIKE ... INCLUDING INDEXES names it on
# a history table made later; a history table of succeeded jobs holds no dead job (its CHECK
# says so, and the planner skips it for a read of dead jobs), so those made before this
# migration go without. MySQL and MariaDB have no partial indexes: nothing there, as for
# dbqueue_job_dead. SQLite takes Django's own operation.

from django.db import migrations, models

from django_dbqueue.migrations._vendor import OwnDatabaseSide

NAME = "dbqueue_job_dead_kinds"
COLUMNS = "(queue, task, last_error_code)"
CONDITION = "WHERE state = 'dead'"
#: The history table of dead and cancelled jobs, and its copy of the index.
ENDED = "dbqueue_job_ended"
ENDED_NAME = "dbqueue_job_ended_queue_task_last_error_code_idx"
#: Every copy of the index on a history table, by its definition, for the way back.
COPIES = r"""
SELECT i.indexrelid::regclass::text FROM pg_index i
JOIN pg_inherits h ON h.inhrelid = i.indrelid
WHERE h.inhparent = 'dbqueue_job'::regclass
  AND pg_get_indexdef(i.indexrelid)
      LIKE '% USING btree (queue, task, last_error_code) WHERE ((state)::text = ''dead''::text)'
"""


def postgresql_forward(apps, schema_editor):
    tables = {"dbqueue_job": NAME}
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [ENDED])
        if cursor.fetchone()[0]:
            tables[ENDED] = ENDED_NAME
    for table, name in tables.items():
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY {name} ON {table} {COLUMNS} {CONDITION}"
        )


def postgresql_backward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(COPIES)
        copies = [name for (name,) in cursor.fetchall()]
    for name in [NAME, *copies]:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False
    dependencies = [("django_dbqueue", "0023_history_tables")]

    operations = [
        OwnDatabaseSide(
            [
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("state", "dead")),
                        fields=["queue", "task", "last_error_code"],
                        name=NAME,
                    ),
                ),
            ],
            {
                "postgresql": migrations.RunPython(postgresql_forward, postgresql_backward),
                "mysql": None,
            },
        ),
    ]
