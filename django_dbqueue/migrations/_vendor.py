"""What the hand-written migrations share (the loader skips a module whose name starts with _)."""


def run_on(vendor, statements):
    """A ``RunPython`` function that runs ``statements`` on ``vendor``, and nothing elsewhere."""

    def run(apps, schema_editor):
        if schema_editor.connection.vendor == vendor:
            for statement in statements:
                schema_editor.execute(statement)

    return run


def run_on_mysql(statements):
    """A ``RunPython`` function that runs ``statements`` on MySQL/MariaDB, and nothing elsewhere."""
    return run_on("mysql", statements)
