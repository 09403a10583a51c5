# Hand-written: the finished and subject indexes become partial, and subject_type loses its
# own index (the subject index leads with it), so enqueues and claims, whose rows have
# neither a finish time nor, mostly, a subject, write three index entries fewer per row.
#
# On PostgreSQL the indexes are built CONCURRENTLY, under a temporary name that then
# replaces the old index: a big job table takes enqueues and claims all the while (a plain
# CREATE INDEX would hold them until a 10-million-row index is built). Each statement runs
# on its own, outside a transaction, as CONCURRENTLY requires; a build that was interrupted
# leaves an invalid index under the temporary name, which running the migration again drops
# first. MySQL and MariaDB change nothing: they ignore index conditions, and InnoDB keeps
# the index a foreign key needs. SQLite takes Django's own operations.

import django.db.models.deletion
from django.db import migrations, models

from django_dbqueue.migrations._vendor import OwnDatabaseSide

FK_INDEX = "dbqueue_job_subject_type_id_bdec4d23"  # Django's name for it in 0001


def rebuilt(name: str, definition: str) -> list[str]:
    """Replace index ``name`` with ``definition`` (``ON ...``), never holding off writes."""
    temporary = f"{name}_0007"
    return [
        f"DROP INDEX CONCURRENTLY IF EXISTS {temporary}",
        f"CREATE INDEX CONCURRENTLY {temporary} {definition}",
        f"DROP INDEX CONCURRENTLY IF EXISTS {name}",
        f"ALTER INDEX {temporary} RENAME TO {name}",
    ]


POSTGRESQL_FORWARD = [
    *rebuilt("dbqueue_job_finished", "ON dbqueue_job (finished_at) WHERE finished_at IS NOT NULL"),
    *rebuilt(
        "dbqueue_job_subject",
        "ON dbqueue_job (subject_type_id, subject_id) WHERE subject_type_id IS NOT NULL",
    ),
    f"DROP INDEX CONCURRENTLY IF EXISTS {FK_INDEX}",
]
POSTGRESQL_BACKWARD = [
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {FK_INDEX} ON dbqueue_job (subject_type_id)",
    *rebuilt("dbqueue_job_subject", "ON dbqueue_job (subject_type_id, subject_id)"),
    *rebuilt("dbqueue_job_finished", "ON dbqueue_job (finished_at)"),
]



class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction (nor can MySQL's DDL).
    atomic = False
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("django_dbqueue", "0006_triage_indexes"),
    ]

    operations = [
        OwnDatabaseSide(
            [
                migrations.RemoveIndex(model_name="job", name="dbqueue_job_finished"),
                migrations.RemoveIndex(model_name="job", name="dbqueue_job_subject"),
                migrations.AlterField(
                    model_name="job",
                    name="subject_type",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="contenttypes.contenttype",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("finished_at__isnull", False)),
                        fields=["finished_at"],
                        name="dbqueue_job_finished",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=models.Q(("subject_type__isnull", False)),
                        fields=["subject_type", "subject_id"],
                        name="dbqueue_job_subject",
                    ),
                ),
            ],
            {
                "postgresql": migrations.RunSQL(POSTGRESQL_FORWARD, POSTGRESQL_BACKWARD),
                "mysql": None,
            },
        ),
    ]
