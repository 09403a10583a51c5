# Written by hand: a DateTimeField cannot be altered into a BigIntegerField in place (no cast
# from timestamptz to bigint), so the slots move to a new column through Python, which
# reads each one as Django stored it (aware UTC, or naive local time when USE_TZ is off).

from datetime import datetime
from datetime import timezone as dt_timezone

from django.conf import settings
from django.db import migrations, models
from django.utils import timezone


def to_epoch_seconds(apps, schema_editor):
    """Each slot as UTC epoch seconds; a naive one is local time (``USE_TZ`` off)."""
    if schema_editor.connection.vendor == "postgresql":
        # timestamptz holds the instant: the conversion is exact by construction, also for
        # a slot in an hour a DST fall-back repeats (with USE_TZ off Django reads it back as
        # naive local time, right only while the driver's fold survives make_aware).
        schema_editor.execute(
            "UPDATE dbqueue_periodic_slot SET last_slot_seconds = extract(epoch FROM last_slot)"
        )
        return
    slots = apps.get_model("django_dbqueue", "PeriodicSlot").objects.using(
        schema_editor.connection.alias
    )
    for row in slots.all():
        moment = row.last_slot
        if timezone.is_naive(moment):
            moment = timezone.make_aware(moment)
        row.last_slot_seconds = int(moment.timestamp())
        row.save(update_fields=["last_slot_seconds"])


def to_datetimes(apps, schema_editor):
    """Back to the datetimes ``0010`` stored: naive local time when ``USE_TZ`` is off."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "UPDATE dbqueue_periodic_slot SET last_slot = to_timestamp(last_slot_seconds)"
        )
        return
    slots = apps.get_model("django_dbqueue", "PeriodicSlot").objects.using(
        schema_editor.connection.alias
    )
    for row in slots.all():
        moment = datetime.fromtimestamp(row.last_slot_seconds, dt_timezone.utc)
        row.last_slot = moment if settings.USE_TZ else timezone.make_naive(moment)
        row.save(update_fields=["last_slot"])


class Migration(migrations.Migration):
    dependencies = [
        ("django_dbqueue", "0010_database_clock_in_utc_defaults"),
    ]

    operations = [
        # Nullable first, so that going back can add the column again before refilling it.
        migrations.AlterField(
            model_name="periodicslot",
            name="last_slot",
            field=models.DateTimeField(null=True),
        ),
        migrations.AddField(
            model_name="periodicslot",
            name="last_slot_seconds",
            field=models.BigIntegerField(null=True),
        ),
        migrations.RunPython(to_epoch_seconds, to_datetimes),
        migrations.RemoveField(
            model_name="periodicslot",
            name="last_slot",
        ),
        migrations.RenameField(
            model_name="periodicslot",
            old_name="last_slot_seconds",
            new_name="last_slot",
        ),
        migrations.AlterField(
            model_name="periodicslot",
            name="last_slot",
            field=models.BigIntegerField(help_text="The slot's time, UTC epoch seconds."),
        ),
    ]
