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
# MySQL and MariaDB have no partial indexes and no advisory lock that ends with the
# transaction. There a generated column, limited (1 for a job under a limit, else 0), joins
# serial_keyed in the index the claim reads keyless and keyed jobs from
# (dbqueue_job_ready_keyed_my, 0015), so the keyless jobs are read in claim order without
# walking past limited ones. dbqueue_job_limited_my, led by the state, serves the walk of
# the limits with a ready job (a loose index scan), the ready jobs of each limit in claim
# order and the count of its running ones; it orders by negated_priority (a generated
# column, -priority) rather than by priority DESC: MariaDB makes no loose scan of an index
# with a descending part, and reads every entry instead. dbqueue_limit holds a row per
# limit, which the claim locks (FOR UPDATE SKIP LOCKED) before it counts that limit's
# running jobs, where PostgreSQL takes the advisory lock (sql/mysql.sql, claim). Its key
# takes the server's binary NO PAD collation (0009), as every key column of the app does.
# One ALTER TABLE does the rest: a CHECK constraint cannot be added in place, so the table
# is rewritten once, taking writes to it meanwhile (as 0009 did), and the index changes ride
# along. MariaDB drops a CHECK constraint with DROP CONSTRAINT, MySQL 8.0.17 with DROP CHECK.

from django.db import migrations, models

from django_dbqueue.collation import exact_collation
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
    "ALTER TABLE dbqueue_job "
    "ADD COLUMN limited tinyint AS (CASE WHEN limit_key IS NULL THEN 0 ELSE 1 END) VIRTUAL, "
    "ADD COLUMN negated_priority bigint AS (-CAST(priority AS SIGNED)) VIRTUAL, "
    "DROP INDEX dbqueue_job_ready_keyed_my, "
    "ADD INDEX dbqueue_job_ready_keyed_my "
    "(state, serial_keyed, limited, priority DESC, run_at, id), "
    "ADD INDEX dbqueue_job_limited_my (state, limit_key, negated_priority, run_at, id), "
    f"ADD CONSTRAINT dbqueue_job_limit_shape CHECK ({LIMIT_SHAPE})",
    "CREATE TABLE dbqueue_limit (limit_key varchar(300) NOT NULL PRIMARY KEY) "
    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE={collation}",
]
MYSQL_BACKWARD = [
    "DROP TABLE IF EXISTS dbqueue_limit",
    "ALTER TABLE dbqueue_job "
    "{drop_check} dbqueue_job_limit_shape, "
    "DROP INDEX dbqueue_job_limited_my, "
    "DROP INDEX dbqueue_job_ready_keyed_my, "
    "ADD INDEX dbqueue_job_ready_keyed_my (state, serial_keyed, priority DESC, run_at, id), "
    "DROP COLUMN negated_priority, "
    "DROP COLUMN limited",
]


def mysql_statements(statements):
    """A ``RunPython`` function running ``statements`` with this server's exact collation and
    CHECK-dropping clause filled in."""

    def run(apps, schema_editor):
        connection = schema_editor.connection
        names = {
            "collation": exact_collation(connection),
            "drop_check": "DROP CONSTRAINT" if connection.mysql_is_mariadb else "DROP CHECK",
        }
        for statement in statements:
            schema_editor.execute(statement.format(**names))

    return run

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
                "mysql": migrations.RunPython(
                    mysql_statements(MYSQL_FORWARD), mysql_statements(MYSQL_BACKWARD)
                ),
            },
        ),
        migrations.RunPython(
            run_on("postgresql", POSTGRESQL_ROOM), run_on("postgresql", POSTGRESQL_ROOM_BACKWARD)
        ),
    ]
