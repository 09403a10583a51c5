"""Benchmarks of django_dbqueue against the raw SQL of its own protocol.

``python -m benchmarks`` creates a PostgreSQL database, measures enqueue,
drain, pickup latency, drain over a large table and worker memory, each next
to its raw-psycopg counterpart in the same run, prints a table and writes
JSON. See ``benchmarks/__main__.py`` for the options.
"""
