"""The worker runtime behind ``runworkers``: claimer, pool, heartbeat, listener, reaper.

``supervisor.Worker`` is the process; ``execute.execute`` runs one claimed job.
"""
