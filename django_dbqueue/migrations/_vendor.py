"""What the hand-written migrations share (the loader skips a module whose name starts with _)."""

from django.db import migrations

from django_dbqueue.collation import exact_collation


def run_on(vendor, statements):
    """A ``RunPython`` function that runs ``statements`` on ``vendor``, and nothing elsewhere.

    Each is sent as it is, with no parameters, so a ``%`` in it (PL/pgSQL's ``format``)
    reaches the server unchanged.
    """

    def run(apps, schema_editor):
        if schema_editor.connection.vendor == vendor:
            for statement in statements:
                schema_editor.execute(statement, params=None)

    return run


def exact_collation_of(table):
    """A ``RunPython`` function giving ``table`` the app's exact collation on MySQL/MariaDB
    (migration 0009: keys and names compare byte for byte), and doing nothing elsewhere."""

    def convert(apps, schema_editor):
        connection = schema_editor.connection
        if connection.vendor == "mysql":
            schema_editor.execute(
                f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 "
                f"COLLATE {exact_collation(connection)}"
            )

    return convert


def run_on_mysql(statements):
    """A ``RunPython`` function that runs ``statements`` on MySQL/MariaDB, and nothing elsewhere."""
    return run_on("mysql", statements)


class OwnDatabaseSide(migrations.SeparateDatabaseAndState):
    """``operations``, with their database side replaced on the vendors ``instead`` names.

    ``instead`` maps a vendor to the operation that does the work there, or to None for
    nothing; on other vendors ``operations`` change the database as usual.
    """

    def __init__(self, operations, instead):
        super().__init__(database_operations=operations, state_operations=operations)
        self.instead = instead

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        self._apply("database_forwards", app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        self._apply("database_backwards", app_label, schema_editor, from_state, to_state)

    def _apply(self, direction, app_label, schema_editor, from_state, to_state):
        operation = self.instead.get(schema_editor.connection.vendor, super())
        if operation is not None:
            getattr(operation, direction)(app_label, schema_editor, from_state, to_state)
