# PostgreSQL moves finished jobs out of the table the claim reads (issue 31: history at scale).
# dbqueue_job stays where every job is written and claimed; a finished job moves, in batches
# soon after it finishes, into a history table that INHERITS (dbqueue_job), so a read of
# dbqueue_job (the ORM, the admin, get_result, a workflow's results) still sees it, with its
# id, while the worker's statements read ONLY dbqueue_job (sql/postgresql.sql). Succeeded jobs
# go to one table per period of HISTORY_TABLE_DAYS (UTC days counted from 1970-01-01), named
# after the period's first day and the day after its last (dbqueue_job_succeeded_20261204_20261205
# for a day), so a table of another period length never has the same name; retention drops a
# whole table; dead and cancelled jobs, few and often kept for triage, go to dbqueue_job_ended.
# Each history table carries a CHECK of what it holds, so a write that would make one of its
# rows unfinished fails loudly instead of leaving a ready job where no claim looks.
#
# dbqueue_history_table(state, finished, days) returns the history table a job finished in
# that state at that time belongs to, creating it when it is missing (an advisory lock makes
# two creators wait for each other; creating takes SHARE UPDATE EXCLUSIVE on dbqueue_job,
# which no read or write of a job waits for). Its indexes are dbqueue_job's (LIKE ... INCLUDING
# INDEXES), so the admin's pages plan alike in every table, but for the partial ones of jobs
# not finished (the claim's, the leases', the active dedupe key's), which no row of a
# history table can enter: each would only cost every read of dbqueue_job time to plan.
#
# dbqueue_move_finished(batch, days, keep_from, after) moves up to batch finished jobs of
# dbqueue_job that retention keeps (succeeded at keep_from or later, NULL: all) and that
# finished at after or later (NULL: any; the caller passes the last batch's reached, so a
# sweep of many batches reads on from where the last one stopped instead of stepping, each
# batch, over the index entries of every job it moved until a vacuum removes them: a walk
# that grew with the move, 6,000 jobs a second and falling after 6 M of a 10 M-job upgrade
# whose finish times all differ), oldest finish first, and
# up to batch dead and batch cancelled ones finished before keep_from (their retention is
# their own), each locked FOR UPDATE SKIP LOCKED (a row another transaction holds stays for a later
# batch), deleted from dbqueue_job and inserted into its history table in one statement per
# table. A succeeded job already past retention stays, for the purge to delete: moving it
# would only copy it before its deletion. Each part reads its own index (the finished jobs',
# or the partial one of its state), so a backlog of such jobs is never read through; the dead
# and cancelled ones before keep_from are looked for only in a batch that found fewer than
# batch kept ones (the last of a sweep), once the newer ones are gone: the partial index of
# each state holds them too, and a search through it in every batch of a large move would
# step over every one of them each time (a first version did: 600 ms a batch with 30,000 dead
# jobs waiting, when SUCCEEDED_RETENTION is None and keep_from NULL). Returns how many moved,
# and reached: the latest finish time among them (NULL when none moved).
#
# dbqueue_drop_history(history table) drops a table of succeeded jobs that retention has
# passed whole, with the dependency edges of its jobs, and returns how many jobs it held; or
# NULL, dropping nothing, when one of its jobs is still needed by a dependent not finished
# (the batched purge then deletes the others), or when a lock is not granted within a second
# (a later sweep tries again). It first locks the table EXCLUSIVE, which reads of jobs do not
# wait for but every write to the table does (an enqueue that would depend on one of its jobs
# included), so no dependent appears once it has checked; DROP TABLE then takes ACCESS
# EXCLUSIVE for the moment the drop lasts. The statements of the worker read ONLY dbqueue_job
# and never wait for it.
#
# Backward, every history row goes back into dbqueue_job and the tables are dropped.
#
# MySQL, MariaDB and SQLite keep every job in dbqueue_job: nothing to create.

from django.db import migrations

from django_dbqueue.migrations._vendor import run_on

POSTGRESQL_FORWARD = [
    """
    CREATE OR REPLACE FUNCTION dbqueue_history_table(
        state text, finished timestamptz, days integer
    ) RETURNS regclass
    LANGUAGE plpgsql VOLATILE SET client_min_messages = warning AS $$
    DECLARE
        start date;
        name text;
        holds text;
        schema text := (SELECT relnamespace::regnamespace::text FROM pg_class
                        WHERE oid = 'dbqueue_job'::regclass);
        unfinished record;
    BEGIN
        IF state = 'succeeded' THEN
            start := date '1970-01-01'
                + ((finished AT TIME ZONE 'UTC')::date - date '1970-01-01') / days * days;
            name := 'dbqueue_job_succeeded_' || to_char(start, 'YYYYMMDD') || '_'
                || to_char(start + days, 'YYYYMMDD');
            holds := format(
                'state = %L AND finished_at >= %L AND finished_at < %L', state,
                start::timestamp AT TIME ZONE 'UTC', (start + days)::timestamp AT TIME ZONE 'UTC'
            );
        ELSIF state IN ('dead', 'cancelled') THEN
            name := 'dbqueue_job_ended';
            holds := 'state IN (''dead'', ''cancelled'')';
        ELSE
            RAISE EXCEPTION 'a % job has no history table', state;
        END IF;
        IF to_regclass(format('%I.%I', schema, name)) IS NULL THEN
            PERFORM pg_advisory_xact_lock(hashtext('dbqueue_history_table'));
            IF to_regclass(format('%I.%I', schema, name)) IS NULL THEN
                EXECUTE format(
                    'CREATE TABLE %I.%I (LIKE dbqueue_job INCLUDING INDEXES, CHECK (%s)) '
                    'INHERITS (dbqueue_job)', schema, name, holds
                );
                FOR unfinished IN
                    SELECT i.indexrelid::regclass AS name FROM pg_index i
                    WHERE i.indrelid = to_regclass(format('%I.%I', schema, name))
                      AND pg_get_expr(i.indpred, i.indrelid) ~ '''(waiting|ready|running)'''
                      AND pg_get_expr(i.indpred, i.indrelid)
                          !~ '''(succeeded|dead|cancelled)'''
                LOOP
                    EXECUTE format('DROP INDEX %s', unfinished.name);
                END LOOP;
            END IF;
        END IF;
        RETURN to_regclass(format('%I.%I', schema, name));
    END
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION dbqueue_move_finished(
        batch integer, days integer, keep_from timestamptz, after timestamptz,
        OUT moved integer, OUT reached timestamptz
    )
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        target record;
        inserted integer;
    BEGIN
        moved := 0;
        FOR target IN
            WITH kept AS (
                SELECT id, state, finished_at FROM ONLY dbqueue_job
                WHERE finished_at >= COALESCE(GREATEST(keep_from, after), '-infinity')
                ORDER BY finished_at
                LIMIT batch
                FOR UPDATE SKIP LOCKED
            )
            SELECT dbqueue_history_table(min(f.state), min(f.finished_at), days) AS name,
                   array_agg(f.id) AS ids, max(f.finished_at) AS last
            FROM (
                SELECT * FROM kept
                UNION ALL
                SELECT * FROM (
                    SELECT id, state, finished_at FROM ONLY dbqueue_job
                    WHERE state = 'dead' AND finished_at < keep_from
                      AND (SELECT count(*) FROM kept) < batch
                    LIMIT batch
                    FOR UPDATE SKIP LOCKED
                ) AS dead
                UNION ALL
                SELECT * FROM (
                    SELECT id, state, finished_at FROM ONLY dbqueue_job
                    WHERE state = 'cancelled' AND finished_at < keep_from
                      AND (SELECT count(*) FROM kept) < batch
                    LIMIT batch
                    FOR UPDATE SKIP LOCKED
                ) AS cancelled
            ) AS f
            GROUP BY f.state = 'succeeded',
                     CASE WHEN f.state = 'succeeded' THEN
                         ((f.finished_at AT TIME ZONE 'UTC')::date - date '1970-01-01') / days
                     END
        LOOP
            EXECUTE format(
                'WITH m AS (DELETE FROM ONLY dbqueue_job WHERE id = ANY ($1) RETURNING *) '
                'INSERT INTO %s SELECT * FROM m', target.name
            ) USING target.ids;
            GET DIAGNOSTICS inserted = ROW_COUNT;
            moved := moved + inserted;
            reached := GREATEST(reached, target.last);
        END LOOP;
    END
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION dbqueue_drop_history(history regclass) RETURNS bigint
    LANGUAGE plpgsql VOLATILE SET lock_timeout = '1s' AS $$
    DECLARE
        needed boolean;
        jobs bigint;
    BEGIN
        EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE', history);
        EXECUTE format(
            'SELECT EXISTS (SELECT 1 FROM %s h '
            'JOIN dbqueue_dependency e ON e.depends_on_id = h.id '
            'JOIN dbqueue_job d ON d.id = e.job_id '
            'WHERE d.state IN (''waiting'', ''ready'', ''running'') '
            'OR d.pending_dependencies > 0)', history
        ) INTO needed;
        IF needed THEN
            RETURN NULL;
        END IF;
        EXECUTE format('SELECT count(*) FROM %s', history) INTO jobs;
        EXECUTE format(
            'DELETE FROM dbqueue_dependency WHERE depends_on_id IN (SELECT id FROM %1$s) '
            'OR job_id IN (SELECT id FROM %1$s)', history
        );
        EXECUTE format('DROP TABLE %s', history);
        RETURN jobs;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        RETURN NULL;
    END
    $$
    """,
]
POSTGRESQL_BACKWARD = [
    """
    DO $$
    DECLARE
        child regclass;
    BEGIN
        FOR child IN
            SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'dbqueue_job'::regclass
        LOOP
            EXECUTE format(
                'WITH m AS (DELETE FROM %s RETURNING *) INSERT INTO dbqueue_job SELECT * FROM m',
                child
            );
            EXECUTE format('DROP TABLE %s', child);
        END LOOP;
    END
    $$
    """,
    "DROP FUNCTION IF EXISTS dbqueue_drop_history(regclass)",
    "DROP FUNCTION IF EXISTS dbqueue_move_finished(integer, integer, timestamptz, timestamptz)",
    "DROP FUNCTION IF EXISTS dbqueue_history_table(text, timestamptz, integer)",
]


class Migration(migrations.Migration):
    dependencies = [("django_dbqueue", "0022_awaited_among")]

    operations = [
        migrations.RunPython(
            run_on("postgresql", POSTGRESQL_FORWARD),
            run_on("postgresql", POSTGRESQL_BACKWARD),
        ),
    ]
