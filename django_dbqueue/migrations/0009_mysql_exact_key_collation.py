# Hand-written: on MySQL and MariaDB, the app's tables compare text exactly, as PostgreSQL
# and SQLite do. Under the servers' default collations dedupe keys, serial keys, task,
# queue and worker names compare without case and accents ("invoice:ABC" = "invoice:abc",
# "café" = "cafe"), and MariaDB's utf8mb4_bin ignores trailing spaces: a distinct job
# deduplicated into another and was never written. Each table is converted to the server's
# binary NO PAD collation (django_dbqueue.collation), which also becomes the table's
# default, so columns added later compare exactly too; the unique index on
# active_dedupe_key and its generated column are rebuilt with it. Rows the old collation
# kept apart stay apart under an exact one, so the conversion cannot fail on a duplicate.
# It rewrites the table, which takes writes to it meanwhile.
# Going back leaves the tables as they are: the schema before this migration works the
# same with exact comparison, and loosening it again could merge distinct active keys.
# PostgreSQL and SQLite are left untouched.

from django.db import migrations

from django_dbqueue.collation import exact_collation

#: The app's tables at this migration (later tables are converted by their own migration).
TABLES = ("dbqueue_job", "dbqueue_periodic_slot")


def convert_to_exact_collation(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "mysql":
        collation = exact_collation(connection)
        for table in TABLES:
            schema_editor.execute(
                f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"
            )


class Migration(migrations.Migration):
    # MySQL cannot roll DDL back; Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [("django_dbqueue", "0008_postgresql_queue_table_vacuum")]

    operations = [
        migrations.RunPython(convert_to_exact_collation, migrations.RunPython.noop),
    ]
