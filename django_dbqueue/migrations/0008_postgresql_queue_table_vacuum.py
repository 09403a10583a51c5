# Hand-written: on PostgreSQL, the job table is vacuumed as a queue table, not as a table
# of mostly settled rows. Every claimed job leaves a dead entry at the head of the ready
# index, and each claim walks every page of them, in index order, before it reaches a ready
# job. Only a vacuum that cleans the indexes removes them. Until then claims grow slower:
# 150,000 jobs into a drain, a claim of 8 read 908 pages in 4 ms, and 20 pages in 0.14 ms
# once the table was vacuumed (a 1 x 8 worker drained 4,700 jobs/s at first, 2,100 by then).
#
# PostgreSQL's defaults wait for dead rows to reach a fifth of the table, so on a table that
# keeps its finished jobs (SUCCEEDED_RETENTION) a million jobs and more run between vacuums;
# and since PostgreSQL 14 a vacuum skips the indexes altogether while dead rows sit on fewer
# than 2% of the table's pages, which is where a queue's dead rows often are: on its newest
# pages. So here: a vacuum once 1,000 rows and 0.5% of the table are dead (on 10 million
# rows, about 25,000 jobs apart; every such vacuum reads each index whole, so its cost grows
# with the table as the gap does), and always with the indexes. MySQL's and MariaDB's InnoDB
# purges its indexes on its own; SQLite has no autovacuum of this kind. Going back resets
# the three to the server's defaults.

from django.db import migrations

#: The job table's storage parameters on PostgreSQL (``ALTER TABLE ... SET``).
QUEUE_TABLE_VACUUM = {
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_scale_factor": "0.005",
    "vacuum_index_cleanup": "on",
}


def set_parameters(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        settings = ", ".join(f"{name} = {value}" for name, value in QUEUE_TABLE_VACUUM.items())
        schema_editor.execute(f"ALTER TABLE dbqueue_job SET ({settings})")


def reset_parameters(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE dbqueue_job RESET ({', '.join(QUEUE_TABLE_VACUUM)})")


class Migration(migrations.Migration):
    dependencies = [("django_dbqueue", "0007_partial_finished_and_subject_indexes")]

    operations = [migrations.RunPython(set_parameters, reset_parameters)]
