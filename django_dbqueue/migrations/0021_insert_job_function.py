# PostgreSQL's single-job enqueue moves into dbqueue_insert_job (issue 33: enqueue on Django's
# defaults). Django sends a statement unprepared, so the server parsed and planned the whole
# INSERT ... ON CONFLICT of insert_job on every enqueue: about a third of its CPU. PL/pgSQL
# plans a function's statements once per session and keeps the plans, so a call costs the
# parse of a one-line SELECT; no protocol-level prepared statement is made, so it works the
# same behind a pooler in transaction mode.
#
# dbqueue_insert_job inserts one ready or waiting job: the row, the skipped duplicate of an
# active (task, dedupe_key) and the NOTIFY of insert_job, unchanged (sql/postgresql.sql). It
# returns the new row's id, created_at and run_at, or no row for a duplicate. Its parameters
# are named as the columns they fill; "#variable_conflict use_column" makes the ON CONFLICT
# clause read the columns, and the VALUES list, which sees no column, reads the parameters.
#
# MySQL, MariaDB and SQLite insert jobs in their own statements: nothing to create.

from django.db import migrations

from django_dbqueue.migrations._vendor import run_on

POSTGRESQL_INSERT_JOB = [
    """
    CREATE OR REPLACE FUNCTION dbqueue_insert_job(
        queue text, task text, call jsonb, state text, priority integer,
        run_at timestamptz, delay double precision, max_attempts integer,
        lease_seconds integer, dedupe_key text, serial_key text, subject_type_id integer,
        subject_id text, backend text, meta jsonb, pending_dependencies integer,
        limit_key text, limit_size integer, limit_rate double precision, notify boolean,
        channel text
    )
    RETURNS TABLE (job_id bigint, job_created_at timestamptz, job_run_at timestamptz)
    LANGUAGE plpgsql VOLATILE AS $$
    #variable_conflict use_column
    BEGIN
        INSERT INTO dbqueue_job AS j (
            queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts,
            lease_token, lease_seconds, created_at, dedupe_key, serial_key, subject_type_id,
            subject_id, backend, last_worker_id, last_error_code, last_error, errors, meta,
            pending_dependencies, limit_key, limit_size, limit_rate
        ) VALUES (
            queue, task, call -> 'args', call -> 'kwargs', state, priority,
            COALESCE(run_at, statement_timestamp() + make_interval(secs => delay)),
            0, max_attempts, 0, lease_seconds, statement_timestamp(), dedupe_key,
            serial_key, subject_type_id, subject_id, backend, '', '', '', '[]'::jsonb,
            meta, pending_dependencies, limit_key, limit_size, limit_rate
        )
        ON CONFLICT (task, dedupe_key)
            WHERE dedupe_key IS NOT NULL AND state IN ('waiting', 'ready', 'running')
        DO NOTHING
        RETURNING j.id, j.created_at, j.run_at INTO job_id, job_created_at, job_run_at;
        IF FOUND THEN
            IF notify THEN
                PERFORM pg_notify(channel, queue);
            END IF;
            RETURN NEXT;
        END IF;
    END
    $$
    """
]
POSTGRESQL_INSERT_JOB_BACKWARD = [
    "DROP FUNCTION IF EXISTS dbqueue_insert_job("
    "text, text, jsonb, text, integer, timestamptz, double precision, integer, integer, text, "
    "text, integer, text, text, jsonb, integer, text, integer, double precision, boolean, text)"
]


class Migration(migrations.Migration):
    dependencies = [("django_dbqueue", "0020_limited_claim")]

    operations = [
        migrations.RunPython(
            run_on("postgresql", POSTGRESQL_INSERT_JOB),
            run_on("postgresql", POSTGRESQL_INSERT_JOB_BACKWARD),
        ),
    ]
