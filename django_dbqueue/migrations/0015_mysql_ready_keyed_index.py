# Hand-written: on MySQL and MariaDB, the claim reads keyless and keyed ready jobs apart, as
# the partial indexes dbqueue_job_ready_keyless and dbqueue_job_ready_serial let it on
# PostgreSQL (MySQL has no partial index: Django creates those two without their condition,
# over every row). A generated column, serial_keyed (1 for a job with a serial key, else 0),
# leads an index after the state, so the keyless jobs are read in claim order without
# walking past keyed ones, and the keyed ones are read in claim order a window at a time.
# The column is VIRTUAL: adding it writes no row; building the index reads the table once.
# PostgreSQL and SQLite are left untouched.

from django.db import migrations

from django_dbqueue.migrations._vendor import run_on_mysql

MYSQL_FORWARD = [
    "ALTER TABLE dbqueue_job ADD COLUMN serial_keyed tinyint AS "
    "(CASE WHEN serial_key IS NULL THEN 0 ELSE 1 END) VIRTUAL",
    "CREATE INDEX dbqueue_job_ready_keyed_my ON dbqueue_job "
    "(state, serial_keyed, priority DESC, run_at, id)",
]
MYSQL_BACKWARD = [
    "DROP INDEX dbqueue_job_ready_keyed_my ON dbqueue_job",
    "ALTER TABLE dbqueue_job DROP COLUMN serial_keyed",
]


class Migration(migrations.Migration):
    # MySQL cannot roll DDL back; Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [("django_dbqueue", "0014_job_meta_and_progress")]
    operations = [
        migrations.RunPython(run_on_mysql(MYSQL_FORWARD), run_on_mysql(MYSQL_BACKWARD)),
    ]
