# The limited path of PostgreSQL's claim moves into dbqueue_limited_candidates (issue 28,
# "free when unused"): the claim statement's plan then holds one function scan for it,
# behind the one-time filter of its shape.limited probe, instead of a dozen nodes every
# claim initialises even when no limited job is ready; PL/pgSQL plans the function's own
# statements once per session, and runs them only when the probe finds a ready limited job.
#
# dbqueue_limited_candidates(served, wanted, window_size) returns, locked FOR UPDATE SKIP
# LOCKED, the ready due limited jobs of the served queues a claim of wanted jobs may start,
# in the claim's order: it walks the limits with ready jobs (one index probe each), takes
# each one's first due job in a served queue where a fresh snapshot shows room, and, in claim
# order and at most window_size of them, admits each through dbqueue_limit_room (0019: the
# limit's advisory lock taken without waiting, then its running jobs and its pace read with
# a snapshot of their own) until the rooms cover wanted; each admitted limit gives up to its
# room of its jobs, read after its lock. The lock is held to the claim's commit, so the next
# claim of the limit counts what this one starts (sql/postgresql.sql, claim).
#
# MySQL, MariaDB and SQLite claim limited jobs in their own statements: nothing to create.

from django.db import migrations

from django_dbqueue.migrations._vendor import run_on

POSTGRESQL_CANDIDATES = [
    """
    CREATE OR REPLACE FUNCTION dbqueue_limited_candidates(
        served text[], wanted integer, window_size integer
    )
    RETURNS TABLE (job_id bigint, job_queue varchar, job_priority integer, job_run_at timestamptz)
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        head record;
        room integer;
        admitted integer := 0;
    BEGIN
        FOR head IN
            WITH RECURSIVE limit_walk AS (
                SELECT (
                    SELECT min(j.limit_key) FROM dbqueue_job j
                    WHERE j.state = 'ready' AND j.limit_key IS NOT NULL
                ) AS limit_key
                UNION ALL
                SELECT (
                    SELECT min(j.limit_key) FROM dbqueue_job j
                    WHERE j.state = 'ready' AND j.limit_key > w.limit_key
                )
                FROM limit_walk w
                WHERE w.limit_key IS NOT NULL
            )
            SELECT w.limit_key, h.limit_size, h.limit_rate
            FROM limit_walk w
            CROSS JOIN LATERAL (
                SELECT j.id, j.limit_size, j.limit_rate, j.priority, j.run_at
                FROM dbqueue_job j
                WHERE j.state = 'ready' AND j.limit_key = w.limit_key
                  AND j.run_at <= statement_timestamp() AND j.queue = ANY (served)
                ORDER BY j.limit_key, j.priority DESC, j.run_at, j.id
                LIMIT 1
            ) h
            WHERE w.limit_key IS NOT NULL
              AND (h.limit_size IS NULL OR h.limit_size > (
                  SELECT count(*) FROM dbqueue_job r
                  WHERE r.state = 'running' AND r.limit_key = w.limit_key
              ))
            ORDER BY h.priority DESC, h.run_at, h.id
            LIMIT window_size
        LOOP
            EXIT WHEN admitted >= wanted;
            room := dbqueue_limit_room(head.limit_key, head.limit_size, head.limit_rate);
            CONTINUE WHEN room = 0;
            admitted := admitted + room;
            RETURN QUERY
                SELECT m.id, m.queue, m.priority, m.run_at FROM dbqueue_job m
                WHERE m.state = 'ready' AND m.limit_key = head.limit_key
                  AND m.run_at <= statement_timestamp() AND m.queue = ANY (served)
                ORDER BY m.limit_key, m.priority DESC, m.run_at, m.id
                LIMIT least(room, wanted)
                FOR UPDATE SKIP LOCKED;
        END LOOP;
    END
    $$
    """
]
POSTGRESQL_CANDIDATES_BACKWARD = [
    "DROP FUNCTION IF EXISTS dbqueue_limited_candidates(text[], integer, integer)"
]


class Migration(migrations.Migration):
    dependencies = [("django_dbqueue", "0019_rate_limits")]

    operations = [
        migrations.RunPython(
            run_on("postgresql", POSTGRESQL_CANDIDATES),
            run_on("postgresql", POSTGRESQL_CANDIDATES_BACKWARD),
        ),
    ]
