# Rate limits (limits.py): a limit may pace its starts (Job.limit_rate, starts per second)
# as well as, or instead of, capping its running jobs; the pace of each rate-limited
# limit is one row of dbqueue_rate_bucket (RateBucket: when its next start is due).
#
# On PostgreSQL the CHECK constraint is replaced NOT VALID, then validated under a lock
# that lets enqueues and claims go on (as in 0018), and dbqueue_limit_room takes the rate:
# after the limit's lock and its running count, it reads the limit's bucket with a
# snapshot of its own and admits the starts due by now, at most burst = max(1, rate/10)
# at once (limits.burst: the same rule). dbqueue_pace(key, per_second, at) moves the bucket on by
# one start: the claim calls it for each job of a rate limit it starts, before it commits and
# lets go of the lock (sql/postgresql.sql, claim).
# On MySQL and MariaDB the bucket table takes the app's exact binary collation (0009), and
# Django's own RemoveConstraint and AddConstraint replace the CHECK constraint (its backend
# drops one with DROP CHECK on MySQL, DROP CONSTRAINT on MariaDB), forwards and backwards;
# the claim paces limits in SQL (sql/mysql.sql, claim), so there is no function to create.

from importlib import import_module

from django.db import migrations, models

from django_dbqueue.migrations._vendor import OwnDatabaseSide, exact_collation_of, run_on

LIMIT_SHAPE = (
    "(limit_key IS NULL AND limit_size IS NULL AND limit_rate IS NULL) OR "
    "(limit_key IS NOT NULL AND serial_key IS NULL "
    "AND (limit_size IS NULL OR limit_size > 0) AND (limit_rate IS NULL OR limit_rate > 0) "
    "AND (limit_size IS NOT NULL OR limit_rate IS NOT NULL))"
)
OLD_LIMIT_SHAPE = (
    "(limit_key IS NULL AND limit_size IS NULL) OR "
    "(limit_key IS NOT NULL AND limit_size > 0 AND serial_key IS NULL)"
)


def replaced_shape(shape: str) -> list[str]:
    """Replace dbqueue_job_limit_shape with ``shape``, never holding writes off for long."""
    return [
        "ALTER TABLE dbqueue_job DROP CONSTRAINT IF EXISTS dbqueue_job_limit_shape",
        f"ALTER TABLE dbqueue_job ADD CONSTRAINT dbqueue_job_limit_shape CHECK ({shape}) "
        "NOT VALID",
        "ALTER TABLE dbqueue_job VALIDATE CONSTRAINT dbqueue_job_limit_shape",
    ]


POSTGRESQL_ROOM = [
    "DROP FUNCTION IF EXISTS dbqueue_limit_room(text, integer)",
    """
    CREATE OR REPLACE FUNCTION dbqueue_limit_room(key text, size integer, rate float8)
    RETURNS integer
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        room integer := 2147483647;
        burst integer;
        now timestamptz;
        due timestamptz;
    BEGIN
        IF NOT pg_try_advisory_xact_lock(
            hashtext('django_dbqueue.limit'), hashtext(key)
        ) THEN
            RETURN 0;
        END IF;
        IF size IS NOT NULL THEN
            room := greatest(size - (
                SELECT count(*) FROM dbqueue_job WHERE state = 'running' AND limit_key = key
            ), 0);
        END IF;
        IF rate IS NULL OR room = 0 THEN
            RETURN room;
        END IF;
        burst := greatest(1, floor(rate / 10));
        now := clock_timestamp();
        SELECT greatest(b.due_at, now) INTO due
        FROM dbqueue_rate_bucket b WHERE b.limit_key = key;
        due := coalesce(due, now);
        RETURN least(room, greatest(0,
            floor(burst - 1 - extract(epoch FROM due - now) * rate + 1e-9)::integer + 1
        ));
    END
    $$
    """,
]
POSTGRESQL_PACE = [
    """
    CREATE OR REPLACE FUNCTION dbqueue_pace(key text, per_second float8, at timestamptz)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        INSERT INTO dbqueue_rate_bucket AS b (limit_key, due_at, rate)
        VALUES (key, at + make_interval(secs => 1 / per_second), per_second)
        ON CONFLICT (limit_key) DO UPDATE
        SET due_at = greatest(b.due_at, at) + make_interval(secs => 1 / per_second),
            rate = per_second;
        RETURN true;
    END
    $$
    """
]
POSTGRESQL_ROOM_BACKWARD = [
    "DROP FUNCTION IF EXISTS dbqueue_pace(text, float8, timestamptz)",
    "DROP FUNCTION IF EXISTS dbqueue_limit_room(text, integer, float8)",
    # 0018's function, as 0018 created it.
    *import_module("django_dbqueue.migrations.0018_concurrency_limits").POSTGRESQL_ROOM,
]


class Migration(migrations.Migration):
    # MySQL cannot roll DDL back; Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [("django_dbqueue", "0018_concurrency_limits")]

    operations = [
        migrations.CreateModel(
            name="RateBucket",
            fields=[
                ("limit_key", models.CharField(max_length=300, primary_key=True, serialize=False)),
                ("due_at", models.DateTimeField()),
                ("rate", models.FloatField()),
            ],
            options={"db_table": "dbqueue_rate_bucket"},
        ),
        migrations.RunPython(exact_collation_of("dbqueue_rate_bucket"), migrations.RunPython.noop),
        migrations.AddField(
            model_name="job",
            name="limit_rate",
            field=models.FloatField(blank=True, null=True),
        ),
        OwnDatabaseSide(
            [
                migrations.RemoveConstraint(model_name="job", name="dbqueue_job_limit_shape"),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("limit_key__isnull", True),
                                ("limit_rate__isnull", True),
                                ("limit_size__isnull", True),
                            ),
                            models.Q(
                                ("limit_key__isnull", False),
                                ("serial_key__isnull", True),
                                models.Q(
                                    ("limit_size__isnull", True),
                                    ("limit_size__gt", 0),
                                    _connector="OR",
                                ),
                                models.Q(
                                    ("limit_rate__isnull", True),
                                    ("limit_rate__gt", 0),
                                    _connector="OR",
                                ),
                                models.Q(
                                    ("limit_size__isnull", False),
                                    ("limit_rate__isnull", False),
                                    _connector="OR",
                                ),
                            ),
                            _connector="OR",
                        ),
                        name="dbqueue_job_limit_shape",
                    ),
                ),
            ],
            {
                "postgresql": migrations.RunSQL(
                    replaced_shape(LIMIT_SHAPE), replaced_shape(OLD_LIMIT_SHAPE)
                ),
            },
        ),
        migrations.RunPython(
            run_on("postgresql", [*POSTGRESQL_ROOM, *POSTGRESQL_PACE]),
            run_on("postgresql", POSTGRESQL_ROOM_BACKWARD),
        ),
    ]
