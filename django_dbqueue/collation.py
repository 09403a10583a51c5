"""Exact comparison of text on MySQL and MariaDB, as PostgreSQL and SQLite compare it.

Dedupe and serial keys, task, queue and worker names are event ids, tokens and
import paths: two that differ in case, accents or trailing spaces are two keys.
The servers' default collations (``utf8mb4_general_ci``, ``utf8mb4_0900_ai_ci``)
compare them without case and accents, and a PAD SPACE collation (MariaDB's
``utf8mb4_bin``) ignores trailing spaces. The app's tables therefore use each
server's binary NO PAD collation, byte for byte: the migration
``mysql_exact_key_collation`` converts them (later tables are created or converted
so by their own migration), and the system check
``dbqueue.E019`` refuses a table with a column that compares otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.db.backends.mysql.base import DatabaseWrapper as MySQLDatabaseWrapper

#: Binary and NO PAD: MariaDB has it since 10.2, MySQL ``utf8mb4_0900_bin`` since 8.0.17.
MARIADB_EXACT = "utf8mb4_nopad_bin"
MYSQL_EXACT = "utf8mb4_0900_bin"


def exact_collation(connection: MySQLDatabaseWrapper) -> str:
    """The collation that compares utf8mb4 text byte for byte on this server."""
    return MARIADB_EXACT if connection.mysql_is_mariadb else MYSQL_EXACT
