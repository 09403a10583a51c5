# Hand-written: the indexes of the admin's search and filters (issue 34). Queue and task
# get an index over every row, (queue, id) and (task, id), under a condition every job
# meets (id > 0) so that only queries saying it read them (models.EVERY_JOB: the claim and
# next_due keep their own indexes), so a filter choice or a command's
# --queue/--task reads only the rows it shows, newest first, in any state; the dedupe key
# gets a partial one for the exact search, and cancelled jobs one as dead
# jobs have (0006), for the state filter combined with any other; jobs with an error get
# one newest first, for the search of a word found in many errors (PostgreSQL and SQLite;
# on MySQL and MariaDB a plain index on id would be the primary key again).
#
# On PostgreSQL the indexes are built CONCURRENTLY (as in 0007): a big job table takes
# enqueues and claims all the while; a build that was interrupted leaves an invalid index,
# which running the migration again drops first. Then, where the server has pg_trgm, the
# extension is created if this role may (a trusted extension since PostgreSQL 13) and the
# trigram index of the search in error text is built (sql block error_search_index);
# where it cannot be, system check dbqueue.W006 says what to run. MySQL and MariaDB have no
# partial indexes: they get plain ones. SQLite takes Django's own operations.

from django.db import DatabaseError, migrations, models

from django_dbqueue import sql
from django_dbqueue.migrations._vendor import OwnDatabaseSide

INDEXES = {
    "dbqueue_job_queue": "(queue, id) WHERE id > 0",
    "dbqueue_job_task": "(task, id) WHERE id > 0",
    "dbqueue_job_dedupe_key": "(dedupe_key) WHERE dedupe_key IS NOT NULL",
    "dbqueue_job_cancelled": "(id) INCLUDE (queue, task) WHERE state = 'cancelled'",
    "dbqueue_job_failed": "(id) WHERE last_error <> ''",
}
MYSQL_INDEXES = {
    "dbqueue_job_queue": "(queue, id)",
    "dbqueue_job_task": "(task, id)",
    "dbqueue_job_dedupe_key": "(dedupe_key)",
    "dbqueue_job_cancelled": "(state, id)",
}
ERROR_TEXT_INDEX = "dbqueue_job_error_text"


def postgresql_forward(apps, schema_editor):
    connection = schema_editor.connection
    for name, definition in INDEXES.items():
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        schema_editor.execute(f"CREATE INDEX CONCURRENTLY {name} ON dbqueue_job {definition}")
    (state,) = sql.run(connection, "error_search_state", {})
    if state["available"] and not state["installed"]:
        try:
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        except DatabaseError:
            return  # Not this role's to create: dbqueue.W006 tells the operator.
        (state,) = sql.run(connection, "error_search_state", {})
    if state["installed"]:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {ERROR_TEXT_INDEX}")
        sql.run(connection, "error_search_index", {})


def postgresql_backward(apps, schema_editor):
    for name in [ERROR_TEXT_INDEX, *INDEXES]:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


def mysql_forward(apps, schema_editor):
    for name, definition in MYSQL_INDEXES.items():
        schema_editor.execute(f"CREATE INDEX {name} ON dbqueue_job {definition}")


def mysql_backward(apps, schema_editor):
    for name in MYSQL_INDEXES:
        schema_editor.execute(f"DROP INDEX {name} ON dbqueue_job")



class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction (nor can MySQL's DDL).
    atomic = False
    dependencies = [("django_dbqueue", "0012_ready_keyless_index")]

    operations = [
        OwnDatabaseSide(
            [
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("id__gt", 0)),
                        fields=["queue", "id"],
                        name="dbqueue_job_queue",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("id__gt", 0)),
                        fields=["task", "id"],
                        name="dbqueue_job_task",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("dedupe_key__isnull", False)),
                        fields=["dedupe_key"],
                        name="dbqueue_job_dedupe_key",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("state", "cancelled")),
                        fields=["id"],
                        include=("queue", "task"),
                        name="dbqueue_job_cancelled",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("last_error", ""), _negated=True),
                        fields=["id"],
                        name="dbqueue_job_failed",
                    ),
                ),
            ],
            {
                "postgresql": migrations.RunPython(postgresql_forward, postgresql_backward),
                "mysql": migrations.RunPython(mysql_forward, mysql_backward),
            },
        ),
    ]
