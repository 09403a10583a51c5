# Hand-written: MySQL and MariaDB have neither partial indexes nor conditional unique
# constraints, so Django skips the conditions declared on Job (models.W036, W037). On those
# databases only, this adds what the conditions give elsewhere: the unique "active" dedupe
# key (a generated column, NULL once the job is no longer ready or running) and indexes
# that lead with the state, so claims and the reaper read only ready or running rows.
# Other databases are left untouched.

from django.db import migrations

from django_dbqueue.migrations._vendor import run_on_mysql

MYSQL_FORWARD = [
    "ALTER TABLE dbqueue_job ADD COLUMN active_dedupe_key varchar(255) AS "
    "(CASE WHEN state IN ('ready', 'running') THEN dedupe_key END) VIRTUAL",
    "CREATE UNIQUE INDEX dbqueue_job_active_dedupe_my ON dbqueue_job (task, active_dedupe_key)",
    "CREATE INDEX dbqueue_job_ready_my ON dbqueue_job (state, priority DESC, run_at, id)",
    "CREATE INDEX dbqueue_job_running_lease_my ON dbqueue_job (state, lease_until)",
    "CREATE INDEX dbqueue_job_serial_active_my ON dbqueue_job (serial_key, state, id)",
]
MYSQL_BACKWARD = [
    "DROP INDEX dbqueue_job_serial_active_my ON dbqueue_job",
    "DROP INDEX dbqueue_job_running_lease_my ON dbqueue_job",
    "DROP INDEX dbqueue_job_ready_my ON dbqueue_job",
    "DROP INDEX dbqueue_job_active_dedupe_my ON dbqueue_job",
    "ALTER TABLE dbqueue_job DROP COLUMN active_dedupe_key",
]


class Migration(migrations.Migration):
    # MySQL cannot roll DDL back; Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [("django_dbqueue", "0003_serial_running_index")]

    operations = [
        migrations.RunPython(run_on_mysql(MYSQL_FORWARD), run_on_mysql(MYSQL_BACKWARD)),
    ]
