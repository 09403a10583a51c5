# The table of paused queues (pauses.py): one row per queue workers do not claim from.
# On MySQL and MariaDB it takes the server's binary NO PAD collation, as the other tables
# of the app do (migration 0009): the claim compares its queue names with the jobs'.

from django.db import migrations, models

from django_dbqueue.collation import exact_collation


def convert_to_exact_collation(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "mysql":
        schema_editor.execute(
            "ALTER TABLE dbqueue_queue_pause CONVERT TO CHARACTER SET utf8mb4 "
            f"COLLATE {exact_collation(connection)}"
        )


class Migration(migrations.Migration):
    # MySQL cannot roll DDL back; Django refuses DDL inside a transaction there.
    atomic = False
    dependencies = [("django_dbqueue", "0016_workflows")]

    operations = [
        migrations.CreateModel(
            name="QueuePause",
            fields=[
                ("queue", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("paused_at", models.DateTimeField()),
                (
                    "until",
                    models.DateTimeField(
                        blank=True,
                        help_text="When the queue resumes by itself; empty: never.",
                        null=True,
                    ),
                ),
                (
                    "paused_by",
                    models.CharField(
                        blank=True,
                        help_text="Who paused it: a user, or the command.",
                        max_length=150,
                    ),
                ),
            ],
            options={"db_table": "dbqueue_queue_pause"},
        ),
        migrations.RunPython(convert_to_exact_collation, migrations.RunPython.noop),
    ]
