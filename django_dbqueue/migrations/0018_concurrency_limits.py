# Global concurrency limits (limits.py): each job names the limit it counts against
# (limit_key) and its size (limit_size). Ready limited jobs leave the keyless part of the
# ready index for an index of their own, by limit in claim order, and the running ones get
# the index a claim counts them with.
#
# On PostgreSQL the indexes are built CONCURRENTLY (as in 0007: the keyless index is
# rebuilt under a temporary name that then replaces it), and the CHECK constraint is added
# NOT VALID, then validated under a lock that lets enqueues and claims go on: on a big job
# table nothing holds writes off for longer than a moment. The new columns are NULL, which
# adds them without rewriting the table. dbqueue_limit_room(key, size) is the claim's
# admission: it takes limit `key`'s transaction-scoped advisory lock if no other
# transaction holds it (never waits) and then, with a snapshot of its own (a VOLATILE
# PL/pgSQL function takes one per query it runs), counts the limit's running jobs. A claim
# that moves a job of that limit to running holds the lock until it commits, so the next
# claim's count sees those jobs: two claimers never both take the last slot.
# MySQL and MariaDB have no partial indexes: they get plain ones, and their claim locks a
# row per limit instead (sql/mysql.sql).

from django.db import migrations, models

from django_dbqueue.migrations._vendor import OwnDatabaseSide, run_on

LIMIT_SHAPE = (
    "(limit_key IS NULL AND limit_size IS NULL) OR "
    "(limit_key IS NOT NULL AND limit_size > 0 AND serial_key IS NULL)"
)

POSTGRESQL_FORWARD = [
    "DROP INDEX CONCURRENTLY IF EXISTS dbqueue_job_ready_keyless_0018",
    "CREATE INDEX CONCURRENTLY dbqueue_job_ready_keyless_0018 ON dbqueue_job "
    "(queue, priority DESC, run_at, id) "
    "WHERE state = 'ready' AND serial_key IS NULL AND limit_key IS NULL",
    "DROP INDEX CONCURRENTLY IF EXISTS dbqueue_job_ready_keyless",
    "ALTER INDEX dbqueue_job_ready_keyless_0018 RENAME TO dbqueue_job_ready_keyless",
    "DROP INDEX CONCURRENTLY IF EXISTS dbqueue_job_ready_limited",
    "CREATE INDEX CONCURRENTLY dbqueue_job_ready_limited ON dbqueue_job "
    "(limit_key, priority DESC, run_at, id) INCLUDE (queue, limit_size) "
    "WHERE state = 'ready' AND limit_key IS NOT NULL",
    "DROP INDEX CONCURRENTLY IF EXISTS dbqueue_job_running_limited",
    "CREATE INDEX CONCURRENTLY dbqueue_job_running_limited ON dbqueue_job (limit_key) "
    "WHERE state = 'running' AND limit_key IS NOT NULL",
    "ALTER TABLE dbqueue_job DROP CONSTRAINT IF EXISTS dbqueue_job_limit_shape",
    f"ALTER TABLE dbqueue_job ADD CONSTRAINT dbqueue_job_limit_shape CHECK ({LIMIT_SHAPE}) "
    "NOT VALID",
    "ALTER TABLE dbqueue_job VALIDATE CONSTRAINT dbqueue_job_limit_shape",
]
POSTGRESQL_BACKWARD = [
    "ALTER TABLE dbqueue_job DROP CONSTRAINT IF EXISTS dbqueue_job_limit_shape",
    "DROP INDEX CONCURRENTLY IF EXISTS dbqueue_job_running_limited",
    "DROP INDEX CONCURRENTLY IF EXISTS dbqueue_job_ready_limited",
    "DROP INDEX CONCURRENTLY IF EXISTS dbqueue_job_ready_keyless_0018",
    "CREATE INDEX CONCURRENTLY dbqueue_job_ready_keyless_0018 ON dbqueue_job "
    "(queue, priority DESC, run_at, id) WHERE state = 'ready' AND serial_key IS NULL",
    "DROP INDEX CONCURRENTLY IF EXISTS dbqueue_job_ready_keyless",
    "ALTER INDEX dbqueue_job_ready_keyless_0018 RENAME TO dbqueue_job_ready_keyless",
]

POSTGRESQL_ROOM = [
    """
    CREATE OR REPLACE FUNCTION dbqueue_limit_room(key text, size integer) RETURNS integer
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        IF NOT pg_try_advisory_xact_lock(
            hashtext('django_dbqueue.limit'), hashtext(key)
        ) THEN
            RETURN 0;
        END IF;
        RETURN greatest(size - (
            SELECT count(*) FROM dbqueue_job WHERE state = 'running' AND limit_key = key
        ), 0);
    END
    $$
    """
]
POSTGRESQL_ROOM_BACKWARD = ["DROP FUNCTION IF EXISTS dbqueue_limit_room(text, integer)"]

MYSQL_FORWARD = [
    "CREATE INDEX dbqueue_job_ready_limited ON dbqueue_job "
    "(state, limit_key, priority DESC, run_at, id)",
]
MYSQL_BACKWARD = ["DROP INDEX dbqueue_job_ready_limited ON dbqueue_job"]

MODEL_CHANGES = [
    migrations.RemoveIndex(model_name="job", name="dbqueue_job_ready_keyless"),
    migrations.AddIndex(
        model_name="job",
        index=models.Index(
            condition=models.Q(
                ("limit_key__isnull", True), ("serial_key__isnull", True), ("state", "ready")
            ),
            fields=["queue", "-priority", "run_at", "id"],
            name="dbqueue_job_ready_keyless",
        ),
    ),
    migrations.AddIndex(
        model_name="job",
        index=models.Index(
            condition=models.Q(("limit_key__isnull", False), ("state", "ready")),
            fields=["limit_key", "-priority", "run_at", "id"],
            include=("queue", "limit_size"),
            name="dbqueue_job_ready_limited",
        ),
    ),
    migrations.AddIndex(
        model_name="job",
        index=models.Index(
            condition=models.Q(("limit_key__isnull", False), ("state", "running")),
            fields=["limit_key"],
            name="dbqueue_job_running_limited",
        ),
    ),
    migrations.AddConstraint(
        model_name="job",
        constraint=models.CheckConstraint(
            condition=models.Q(
                models.Q(("limit_key__isnull", True), ("limit_size__isnull", True)),
                models.Q(
                    ("limit_key__isnull", False),
                    ("limit_size__gt", 0),
                    ("serial_key__isnull", True),
                ),
                _connector="OR",
            ),
            name="dbqueue_job_limit_shape",
        ),
    ),
]


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction (nor can MySQL's DDL).
    atomic = False
    dependencies = [("django_dbqueue", "0017_queue_pause")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="limit_key",
            field=models.CharField(blank=True, max_length=300, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="limit_size",
            field=models.IntegerField(blank=True, null=True),
        ),
        OwnDatabaseSide(
            MODEL_CHANGES,
            {
                "postgresql": migrations.RunSQL(POSTGRESQL_FORWARD, POSTGRESQL_BACKWARD),
                "mysql": migrations.RunSQL(MYSQL_FORWARD, MYSQL_BACKWARD),
            },
        ),
        migrations.RunPython(
            run_on("postgresql", POSTGRESQL_ROOM), run_on("postgresql", POSTGRESQL_ROOM_BACKWARD)
        ),
    ]
