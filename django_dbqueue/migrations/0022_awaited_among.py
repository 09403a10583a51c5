# PostgreSQL's completion asks once per batch which of its jobs other jobs wait for (issue 33:
# the drain). dbqueue_awaited(job) (0016) was called for every job the statement completed:
# a function call, a snapshot and an index probe per job, about 6 us of the server's CPU per
# drained job while no workflow was in use. dbqueue_awaited_among(jobs) answers for the whole
# batch in one query, with a snapshot of its own taken when it is called, as 0016's function
# reads (a VOLATILE PL/pgSQL function takes one per query it runs): the completion calls it
# once the row locks are held, so it sees an edge an enqueue committed while the statement
# was under way (sql/postgresql.sql, complete).
#
# dbqueue_awaited stays: a worker of the previous release, still running during a rolling
# deploy, completes its jobs through it.
#
# MySQL, MariaDB and SQLite read the edges in their own statements: nothing to create.

from django.db import migrations

from django_dbqueue.migrations._vendor import run_on

POSTGRESQL_FORWARD = [
    """
    CREATE OR REPLACE FUNCTION dbqueue_awaited_among(jobs bigint[]) RETURNS bigint[]
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        RETURN ARRAY(
            SELECT DISTINCT depends_on_id FROM dbqueue_dependency
            WHERE depends_on_id = ANY (jobs) AND state = 'pending'
        );
    END
    $$
    """
]
POSTGRESQL_BACKWARD = ["DROP FUNCTION IF EXISTS dbqueue_awaited_among(bigint[])"]


class Migration(migrations.Migration):
    dependencies = [("django_dbqueue", "0021_insert_job_function")]

    operations = [
        migrations.RunPython(
            run_on("postgresql", POSTGRESQL_FORWARD),
            run_on("postgresql", POSTGRESQL_BACKWARD),
        ),
    ]
