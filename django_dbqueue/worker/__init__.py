"""The worker runtime: running claimed jobs (and, later, the runworkers process)."""
