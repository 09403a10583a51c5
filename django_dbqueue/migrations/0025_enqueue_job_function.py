# PostgreSQL's single-job enqueue calls dbqueue_enqueue_job (issue 33: enqueue on Django's
# defaults). Django sends each statement unprepared, so on every enqueue the server parses and
# analyses the whole call and the client binds every value into it: 0021's dbqueue_insert_job
# takes 21 named parameters, each with its cast. dbqueue_enqueue_job takes three: the values
# every job of the call shares (queue, task, state, options, limit, subject, meta, wake-up
# channel) as one JSON object, the call's arguments as JSON, and whether to notify. Measured
# on 2 cores, PostgreSQL 15, one job per autocommit transaction: through psycopg alone 521 ->
# 483 us a call (the backend's CPU 317 -> 297 us, the client's 77 -> 64 us); through
# enqueue(), in three interleaved runs of the pgqueuer comparison, 1,544-1,617 -> 1,657-1,705
# jobs a second.
#
# The row, the skipped duplicate of an active (task, dedupe_key) (no row returned) and the
# NOTIFY are 0021's, unchanged. A key the shape leaves out, or sets to null, is NULL in the
# row, as a NULL parameter was; numbers travel as JSON numbers and a run_at as its text.
#
# dbqueue_insert_job stays: the previous build's web processes and workers call it until
# they are replaced.
#
# MySQL, MariaDB and SQLite insert jobs in their own statements: nothing to create.

from django.db import migrations

from django_dbqueue.migrations._vendor import run_on

POSTGRESQL_ENQUEUE_JOB = [
    """
    CREATE OR REPLACE FUNCTION dbqueue_enqueue_job(shape jsonb, call jsonb, notify boolean)
    RETURNS TABLE (job_id bigint, job_created_at timestamptz, job_run_at timestamptz)
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        INSERT INTO dbqueue_job AS j (
            queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts,
            lease_token, lease_seconds, created_at, dedupe_key, serial_key, subject_type_id,
            subject_id, backend, last_worker_id, last_error_code, last_error, errors, meta,
            pending_dependencies, limit_key, limit_size, limit_rate
        ) VALUES (
            shape ->> 'queue', shape ->> 'task', call -> 'args', call -> 'kwargs',
            shape ->> 'state', (shape ->> 'priority')::integer,
            COALESCE(
                (shape ->> 'run_at')::timestamptz,
                statement_timestamp()
                    + make_interval(secs => (shape ->> 'delay')::double precision)
            ),
            0, (shape ->> 'max_attempts')::integer, 0, (shape ->> 'lease_seconds')::integer,
            statement_timestamp(), shape ->> 'dedupe_key', shape ->> 'serial_key',
            (shape ->> 'subject_type_id')::integer, shape ->> 'subject_id',
            shape ->> 'backend', '', '', '', '[]'::jsonb, NULLIF(shape -> 'meta', 'null'),
            (shape ->> 'pending_dependencies')::integer, shape ->> 'limit_key',
            (shape ->> 'limit_size')::integer, (shape ->> 'limit_rate')::double precision
        )
        ON CONFLICT (task, dedupe_key)
            WHERE dedupe_key IS NOT NULL AND state IN ('waiting', 'ready', 'running')
        DO NOTHING
        RETURNING j.id, j.created_at, j.run_at INTO job_id, job_created_at, job_run_at;
        IF FOUND THEN
            IF notify THEN
                PERFORM pg_notify(shape ->> 'channel', shape ->> 'queue');
            END IF;
            RETURN NEXT;
        END IF;
    END
    $$
    """
]
POSTGRESQL_ENQUEUE_JOB_BACKWARD = [
    "DROP FUNCTION IF EXISTS dbqueue_enqueue_job(jsonb, jsonb, boolean)"
]


class Migration(migrations.Migration):
    dependencies = [("django_dbqueue", "0024_dead_kinds_index")]

    operations = [
        migrations.RunPython(
            run_on("postgresql", POSTGRESQL_ENQUEUE_JOB),
            run_on("postgresql", POSTGRESQL_ENQUEUE_JOB_BACKWARD),
        ),
    ]
