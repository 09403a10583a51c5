-- Named statements of the lease protocol for SQLite (local development).
-- Every write runs inside BEGIN IMMEDIATE, so the one writer already holds the database
-- lock when these run; %(now)s is then read from the host clock, which is the database's
-- clock for an embedded database. Structured parameters arrive as JSON text. Seconds are
-- added with dbqueue_plus_seconds() and the clock read in UTC with dbqueue_utc_now()
-- (sql/sqlite_time.py): exact to the microsecond, where SQLite's own date functions keep
-- milliseconds.

-- name: insert_jobs
-- Insert one job per element of %(rows)s (a JSON array of {"args", "kwargs"}), all with
-- the same options, ids increasing in input order: %(state)s ready, or waiting for
-- %(pending_dependencies)s jobs (whose edges insert_dependencies writes next). A row whose
-- (task, dedupe_key) matches an unfinished job (waiting, ready or running) is skipped,
-- never an error, so the caller's transaction stays usable: ON CONFLICT repeats the
-- condition of the dedupe index, which SQLite needs to match the index.
-- (%(channel)s and %(notify)s are unused: SQLite has no NOTIFY.)
INSERT INTO dbqueue_job (
    queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts,
    lease_token, lease_seconds, created_at, dedupe_key, serial_key, subject_type_id,
    subject_id, backend, last_worker_id, last_error_code, last_error, errors, meta,
    pending_dependencies, limit_key, limit_size, limit_rate
)
SELECT
    %(queue)s, %(task)s, json_extract(item.value, '$.args'), json_extract(item.value, '$.kwargs'),
    %(state)s, %(priority)s,
    COALESCE(%(run_at)s, dbqueue_plus_seconds(%(now)s, %(delay)s)),
    0, %(max_attempts)s, 0, %(lease_seconds)s, %(now)s, %(dedupe_key)s, %(serial_key)s,
    %(subject_type_id)s, %(subject_id)s, %(backend)s, '', '', '', '[]', %(meta)s,
    %(pending_dependencies)s, %(limit_key)s, %(limit_size)s, %(limit_rate)s
FROM json_each(%(rows)s) AS item
WHERE true
ORDER BY item.key
ON CONFLICT (task, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND state IN ('waiting', 'ready', 'running')
DO NOTHING
RETURNING id, created_at, run_at;

-- name: claim
-- Lease up to %(limit)s due ready jobs of the queues in %(queues)s (NULL: every queue),
-- shared across queues in turn (%(turn)s rotates who goes first), each queue in priority
-- order. A job with a serial key waits while an earlier job (lower id) with that key is
-- ready or running, or any job with that key runs (a requeued one included). Each claimed
-- row gets attempts + 1, lease_token + 1, the worker id and a lease. A paused queue
-- (dbqueue_queue_pause, pauses.py) is never served: the candidates leave out every queue
-- whose pause is in force (until NULL or after %(now)s). The claim holds the database write
-- lock, so every pause committed before it is seen and none commits during it.
-- A job under a limit (limit_key, limits.py) is claimed only while its limit has room: of
-- each limit's due ready jobs in served, unpaused queues, taken in claim order, only the
-- first `room` are candidates. The limit_size and limit_rate of the first of them set the
-- room, the lesser of the two (a limit without one is not capped by it): the size less the
-- limit's running jobs, counted here; and the starts its pace admits now (GCRA, as
-- dbqueue_limit_room on PostgreSQL: burst = max(1, floor(rate / 10)), the bucket's due_at
-- d seconds ahead of %(now)s (0 with no bucket or one behind) admits
-- max(0, floor(burst - 1 - d * rate + 1e-9) + 1)). d is counted in whole microseconds from
-- the text of both timestamps, as PostgreSQL subtracts them; CAST truncates toward zero,
-- so a negative floor is taken apart (it admits nothing), and the float arithmetic is
-- PostgreSQL's, step for step. All of it is exact with no lock of its own: the claim holds
-- the database write lock from before it counts and reads the buckets until it commits, so
-- no other claim runs between the reads and the jobs it leases, every claim before it
-- committed its jobs and bucket moves, and this claim moves the buckets by the starts it
-- made in its own transaction (the statements after the UPDATE). A limit's candidates are
-- a prefix of its claim order and the batch keeps candidates in claim order per queue, so
-- a limit with room fills it in claim order. A slot frees when a job leaves running by any
-- path: nothing is written, since the count reads the running rows themselves.
-- The UPDATE gives each rate-limited job it claims the worker id x'00' (a blob, which no
-- worker id, being text, equals) until the last statement writes the real one, so the
-- bucket statement between them reads exactly the jobs this claim started (%(previous)s
-- would too, but the block keeps PostgreSQL's parameters; started_at and the worker id
-- would not under a clock that stands still) and moves each paced limit's bucket by its k
-- of them: due_at = max(due_at, %(now)s) + k / rate (%(now)s + k / rate for a new row),
-- rate = the greatest rate among them, as PostgreSQL's claim does. The mark is never
-- committed: the block runs in one transaction.
WITH eligible AS MATERIALIZED (
    SELECT id, queue, priority, run_at, limit_key, limit_size, limit_rate
    FROM dbqueue_job AS j
    WHERE state = 'ready' AND run_at <= %(now)s
      AND (%(queues)s IS NULL OR queue IN (SELECT value FROM json_each(%(queues)s)))
      AND NOT EXISTS (
          SELECT 1 FROM dbqueue_queue_pause AS p
          WHERE p.queue = j.queue AND (p.until IS NULL OR p.until > %(now)s)
      )
      AND (serial_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM dbqueue_job AS e
          WHERE e.serial_key = j.serial_key AND e.id < j.id
            AND e.state IN ('ready', 'running')
      ) AND NOT EXISTS (
          SELECT 1 FROM dbqueue_job AS r
          WHERE r.serial_key = j.serial_key AND r.state = 'running'
      ))
),
limited AS (
    SELECT id, limit_key,
           row_number() OVER claim_order AS place,
           first_value(limit_size) OVER claim_order AS size,
           first_value(limit_rate) OVER claim_order AS rate
    FROM eligible
    WHERE limit_key IS NOT NULL
    WINDOW claim_order AS (PARTITION BY limit_key ORDER BY priority DESC, run_at, id)
),
paced AS (
    SELECT h.limit_key, h.size, h.rate,
           max(1, CAST(h.rate / 10.0 AS INTEGER)) - 1
               - coalesce(max(0, (
                     strftime('%%s', substr(b.due_at, 1, 19))
                     - strftime('%%s', substr(%(now)s, 1, 19))
                 ) * 1000000
                 + CAST(substr(substr(b.due_at, 21) || '000000', 1, 6) AS INTEGER)
                 - CAST(substr(substr(%(now)s, 21) || '000000', 1, 6) AS INTEGER)
               ), 0) / 1000000.0 * h.rate
               + 1e-9 AS headroom
    FROM limited AS h
    LEFT JOIN dbqueue_rate_bucket AS b ON b.limit_key = h.limit_key
    WHERE h.place = 1
),
limit_room AS (
    SELECT limit_key,
           size - (
               SELECT count(*) FROM dbqueue_job AS r
               WHERE r.state = 'running' AND r.limit_key = p.limit_key
           ) AS size_room,
           CASE WHEN rate IS NULL THEN NULL
                WHEN headroom < 0 THEN 0
                ELSE CAST(headroom AS INTEGER) + 1 END AS rate_room
    FROM paced AS p
),
candidate AS (
    SELECT id, queue,
           row_number() OVER (PARTITION BY queue ORDER BY priority DESC, run_at, id) AS rank,
           dense_rank() OVER (ORDER BY queue) AS position
    FROM eligible
    WHERE limit_key IS NULL OR id IN (
        SELECT l.id FROM limited AS l JOIN limit_room AS r ON r.limit_key = l.limit_key
        WHERE l.place <= coalesce(r.size_room, l.place)
          AND l.place <= coalesce(r.rate_room, l.place)
    )
),
chosen AS (
    SELECT id FROM candidate
    ORDER BY rank, (position - 1 + %(turn)s) %% (SELECT max(position) FROM candidate)
    LIMIT %(limit)s
)
UPDATE dbqueue_job
SET state = 'running',
    attempts = attempts + 1,
    lease_token = lease_token + 1,
    worker_id = CASE WHEN limit_rate IS NULL THEN %(worker_id)s ELSE x'00' END,
    last_worker_id = %(worker_id)s,
    lease_until = dbqueue_plus_seconds(%(now)s, lease_seconds),
    started_at = %(now)s
WHERE id IN (SELECT id FROM chosen)
RETURNING id, lease_token, task, args, kwargs, attempts, max_attempts, lease_until,
          lease_seconds, queue, priority, run_at, backend, meta;
WITH started AS (
    SELECT limit_key, count(*) / max(limit_rate) AS seconds, max(limit_rate) AS rate
    FROM dbqueue_job
    WHERE state = 'running' AND limit_key IS NOT NULL AND worker_id = x'00'
    GROUP BY limit_key
)
INSERT INTO dbqueue_rate_bucket (limit_key, due_at, rate)
SELECT limit_key, dbqueue_plus_seconds(%(now)s, seconds), rate FROM started
WHERE true
ON CONFLICT (limit_key) DO UPDATE
SET due_at = dbqueue_plus_seconds(
        max(due_at, %(now)s),
        (SELECT seconds FROM started AS s WHERE s.limit_key = excluded.limit_key)
    ),
    rate = excluded.rate;
UPDATE dbqueue_job
SET worker_id = %(worker_id)s
WHERE state = 'running' AND limit_key IS NOT NULL AND worker_id = x'00';

-- name: claim_jobs
-- Lease the jobs of %(job_ids)s (a JSON array of ids) that are ready, due or not: eager mode
-- runs the jobs a commit enqueued, and their retries at once. Priority and serial keys are
-- not consulted (the caller names the jobs). Each claimed row gets what a claim gives it.
UPDATE dbqueue_job
SET state = 'running',
    attempts = attempts + 1,
    lease_token = lease_token + 1,
    worker_id = %(worker_id)s,
    last_worker_id = %(worker_id)s,
    lease_until = dbqueue_plus_seconds(%(now)s, lease_seconds),
    started_at = %(now)s
WHERE id IN (SELECT value FROM json_each(%(job_ids)s)) AND state = 'ready'
RETURNING id, lease_token, task, args, kwargs, attempts, max_attempts, lease_until,
          lease_seconds, queue, priority, run_at, backend, meta;

-- name: next_due
-- Seconds from %(now)s until the next ready job of %(queues)s (NULL: every queue) that is not
-- due yet becomes due, or NULL when there is none (jobs already due are left out: a claim
-- just passed them by). A pause of a served queue that ends by itself (until) is due then
-- too: its jobs are claimable from that moment. So is the next start of a rate-limited
-- limit with due ready jobs in a served queue: its bucket's due_at less (burst - 1) / rate,
-- the moment the claim admits one again, when that is still ahead.
SELECT dbqueue_seconds_between(min(due.at), %(now)s) AS seconds
FROM (
    SELECT min(run_at) AS at FROM dbqueue_job
    WHERE state = 'ready' AND run_at > %(now)s
      AND (%(queues)s IS NULL OR queue IN (SELECT value FROM json_each(%(queues)s)))
    UNION ALL
    SELECT min(until) FROM dbqueue_queue_pause
    WHERE until > %(now)s
      AND (%(queues)s IS NULL OR queue IN (SELECT value FROM json_each(%(queues)s)))
    UNION ALL
    SELECT min(paced.at) FROM (
        SELECT b.limit_key,
               dbqueue_plus_seconds(
                   b.due_at, (1 - max(1, CAST(b.rate / 10.0 AS INTEGER))) / b.rate
               ) AS at
        FROM dbqueue_rate_bucket AS b
    ) AS paced
    WHERE paced.at > %(now)s
      AND EXISTS (
          SELECT 1 FROM dbqueue_job AS j
          WHERE j.state = 'ready' AND j.limit_key = paced.limit_key AND j.run_at <= %(now)s
            AND (%(queues)s IS NULL OR j.queue IN (SELECT value FROM json_each(%(queues)s)))
      )
) AS due;

-- name: pause_queues
-- Pause the queues of %(queues)s (a JSON array of names): from this transaction's commit
-- on, no claim takes their jobs. paused_at is %(now)s; until is %(seconds)s on, to the
-- microsecond (NULL: until resumed). A queue paused already takes the new values.
INSERT INTO dbqueue_queue_pause (queue, paused_at, until, paused_by)
SELECT value, %(now)s, dbqueue_plus_seconds(%(now)s, %(seconds)s), %(actor)s
FROM json_each(%(queues)s)
WHERE true
ON CONFLICT (queue) DO UPDATE
SET paused_at = excluded.paused_at, until = excluded.until, paused_by = excluded.paused_by
RETURNING queue, paused_at, until, paused_by;

-- name: resume_queues
-- Resume the paused queues of %(queues)s (NULL: every paused queue), returning their names.
-- (%(channel)s is unused: no NOTIFY on SQLite; idle workers claim at their next poll.)
DELETE FROM dbqueue_queue_pause
WHERE %(queues)s IS NULL OR queue IN (SELECT value FROM json_each(%(queues)s))
RETURNING queue;

-- name: renew
-- Extend each lease in %(leases)s (JSON [{job_id, lease_token, worker_id}]) by its job's
-- lease_seconds. Applies only to rows still running under that (worker_id, lease_token)
-- with lease_until still ahead of the clock. Returns the ids still owned, each with
-- the time an operator asked it to stop (NULL: not asked). SQLite has no row locks (the
-- write lock is the database's): nothing is skipped.
UPDATE dbqueue_job
SET lease_until = dbqueue_plus_seconds(%(now)s, lease_seconds)
WHERE state = 'running' AND lease_until > %(now)s
  AND EXISTS (
      SELECT 1 FROM json_each(%(leases)s) AS l
      WHERE json_extract(l.value, '$.job_id') = dbqueue_job.id
        AND json_extract(l.value, '$.lease_token') = dbqueue_job.lease_token
        AND json_extract(l.value, '$.worker_id') = dbqueue_job.worker_id
  )
RETURNING id, cancel_requested_at, 0 AS skipped;

-- name: set_progress
-- Store each report in %(reports)s (JSON [{job_id, lease_token, worker_id, progress}],
-- progress as JSON text) as its job's progress, with "at" set to the clock (ISO 8601,
-- UTC). Applies only to rows still running under that (worker_id, lease_token) with
-- lease_until still ahead of the clock. Returns the ids written; SQLite has no row locks
-- (the write lock is the database's): nothing is skipped.
WITH report AS (
    SELECT json_extract(value, '$.job_id') AS job_id,
           json_extract(value, '$.lease_token') AS lease_token,
           json_extract(value, '$.worker_id') AS worker_id,
           json_extract(value, '$.progress') AS progress
    FROM json_each(%(reports)s)
)
UPDATE dbqueue_job
SET progress = json_set(r.progress, '$.at', replace(%(now)s, ' ', 'T') || 'Z')
FROM report AS r
WHERE dbqueue_job.id = r.job_id
  AND state = 'running' AND dbqueue_job.worker_id = r.worker_id
  AND dbqueue_job.lease_token = r.lease_token AND lease_until > %(now)s
RETURNING id, 0 AS skipped;

-- name: complete
-- Mark each leased job in %(rows)s (JSON [{job_id, lease_token, worker_id, result}], result
-- as JSON text or null) succeeded with its result. Each row applies only while its lease
-- is the caller's and live. Unless %(settles)s (the caller then settles the dependents in
-- the same transaction), a job that other jobs wait for is left running and returned
-- deferred: complete it again with %(settles)s. Returns the ids completed (marked by this
-- block's finished_at) and deferred; nothing is skipped (no row locks); the others'
-- leases were lost.
WITH done AS (
    SELECT json_extract(value, '$.job_id') AS job_id,
           json_extract(value, '$.lease_token') AS lease_token,
           json_extract(value, '$.worker_id') AS worker_id,
           json_extract(value, '$.result') AS result
    FROM json_each(%(rows)s)
)
UPDATE dbqueue_job
SET state = 'succeeded', result = json(d.result), worker_id = NULL, lease_until = NULL,
    finished_at = %(now)s
FROM done AS d
WHERE dbqueue_job.id = d.job_id
  AND state = 'running' AND dbqueue_job.worker_id = d.worker_id
  AND dbqueue_job.lease_token = d.lease_token AND lease_until > %(now)s
  AND (%(settles)s OR NOT EXISTS (
      SELECT 1 FROM dbqueue_dependency AS e
      WHERE e.depends_on_id = dbqueue_job.id AND e.state = 'pending'
  ));
SELECT j.id, 0 AS skipped, 0 AS deferred FROM dbqueue_job AS j
WHERE j.id IN (SELECT json_extract(value, '$.job_id') FROM json_each(%(rows)s))
  AND j.state = 'succeeded' AND j.finished_at = %(now)s
UNION ALL
SELECT j.id, 0, 1 FROM dbqueue_job AS j
WHERE NOT %(settles)s
  AND j.id IN (SELECT json_extract(value, '$.job_id') FROM json_each(%(rows)s))
  AND EXISTS (
      SELECT 1 FROM dbqueue_dependency AS e WHERE e.depends_on_id = j.id AND e.state = 'pending'
  );

-- name: release
-- Hand the leased job back unrun: ready and due now, the attempt refunded, the lease token
-- kept (it never decreases). Applies only while the lease is the caller's and live.
UPDATE dbqueue_job
SET state = 'ready', attempts = attempts - 1, worker_id = NULL, lease_until = NULL,
    run_at = %(now)s
WHERE id = %(job_id)s
  AND state = 'running' AND worker_id = %(worker_id)s AND lease_token = %(lease_token)s
  AND lease_until > %(now)s
RETURNING id;

-- name: database_now
-- The clock now, in UTC: SQLite is embedded, so this host's clock is the database's.
SELECT dbqueue_utc_now() AS now;

-- name: lock_lease
-- Return the job's error history if it is still running under (worker_id, lease_token).
-- The write lock is already held; the deadline is checked by record_failures. The clock
-- comes along, in UTC (%(now)s is local time when USE_TZ is off), to stamp the failure with.
SELECT errors, dbqueue_utc_now() AS clock FROM dbqueue_job
WHERE id = %(job_id)s
  AND state = 'running' AND worker_id = %(worker_id)s AND lease_token = %(lease_token)s;

-- name: lock_expired
-- Up to %(limit)s running jobs whose lease has run out, oldest deadline first, each with
-- the clock (UTC) to stamp the expiry with.
SELECT id, lease_token, task, attempts, max_attempts, worker_id, errors, backend,
       dbqueue_utc_now() AS clock
FROM dbqueue_job
WHERE state = 'running' AND lease_until < %(now)s
ORDER BY lease_until
LIMIT %(limit)s;

-- name: record_failures
-- Record a failed attempt for each row of %(rows)s (JSON [{job_id, lease_token, worker_id,
-- retry_at, retry_in, code, last_error, errors}]): ready again at retry_at, or retry_in
-- seconds after %(now)s, or dead when both are null or the attempt budget is spent. With
-- %(expired)s the lease must have run out (the reaper); otherwise it must still be the
-- caller's and live. Returns ids and new states.
WITH failure AS (
    SELECT json_extract(value, '$.job_id') AS job_id,
           json_extract(value, '$.lease_token') AS lease_token,
           json_extract(value, '$.worker_id') AS worker_id,
           COALESCE(dbqueue_plus_seconds(%(now)s, json_extract(value, '$.retry_in')),
                    json_extract(value, '$.retry_at')) AS retry_at,
           json_extract(value, '$.code') AS code,
           json_extract(value, '$.last_error') AS last_error,
           json_extract(value, '$.errors') AS errors
    FROM json_each(%(rows)s)
)
UPDATE dbqueue_job
SET state = CASE WHEN f.retry_at IS NULL OR attempts >= max_attempts
                 THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN f.retry_at IS NULL OR attempts >= max_attempts
                  THEN run_at ELSE f.retry_at END,
    finished_at = CASE WHEN f.retry_at IS NULL OR attempts >= max_attempts
                       THEN %(now)s END,
    worker_id = NULL, lease_until = NULL,
    last_error_code = f.code, last_error = f.last_error, errors = f.errors
FROM failure AS f
WHERE dbqueue_job.id = f.job_id AND state = 'running' AND dbqueue_job.lease_token = f.lease_token
  AND CASE WHEN %(expired)s
           THEN lease_until < %(now)s
           ELSE dbqueue_job.worker_id = f.worker_id AND lease_until > %(now)s END
RETURNING id, state;

-- name: requeue
-- Give dead jobs in %(job_ids)s %(extra_attempts)s more attempts and make them due now.
-- max_attempts stops at 2147483647 (a 32-bit column): a budget at that limit stays there.
-- Id, attempts, dedupe key and history are kept; a cancel request is cleared. At most one job per (task, dedupe_key)
-- is revived: among the selected dead jobs sharing one, the lowest id, and none while an
-- unfinished job (waiting, ready or running) holds it (whether or not SQLite lets the
-- statement see its own changes, the two NOT EXISTS between them exclude a second
-- revival). Returns the ids requeued, each with whether a failed dependency edge leads
-- from it (held: its failure cancelled jobs that waited). (%(channel)s: no NOTIFY on SQLite.)
UPDATE dbqueue_job
SET state = 'ready', max_attempts = MIN(max_attempts + %(extra_attempts)s, 2147483647),
    run_at = %(now)s,
    finished_at = NULL, cancel_requested_at = NULL
WHERE id IN (SELECT value FROM json_each(%(job_ids)s))
  AND state = 'dead'
  AND (dedupe_key IS NULL OR (
      NOT EXISTS (
          SELECT 1 FROM dbqueue_job AS e
          WHERE e.id IN (SELECT value FROM json_each(%(job_ids)s))
            AND e.task = dbqueue_job.task AND e.dedupe_key = dbqueue_job.dedupe_key
            AND e.id < dbqueue_job.id AND e.state = 'dead'
      )
      AND NOT EXISTS (
          SELECT 1 FROM dbqueue_job AS a
          WHERE a.task = dbqueue_job.task AND a.dedupe_key = dbqueue_job.dedupe_key
            AND a.state IN ('waiting', 'ready', 'running')
      )
  ))
RETURNING id, EXISTS (
    SELECT 1 FROM dbqueue_dependency AS e WHERE e.depends_on_id = dbqueue_job.id AND e.state = 'failed'
) AS held;

-- name: run_now
-- Make the ready jobs in %(job_ids)s that are scheduled in the future due now.
-- Returns the ids changed. (%(channel)s: no NOTIFY on SQLite.)
UPDATE dbqueue_job
SET run_at = %(now)s
WHERE id IN (SELECT value FROM json_each(%(job_ids)s))
  AND state = 'ready' AND run_at > %(now)s
RETURNING id;

-- name: cancel
-- Cancel the ready and waiting jobs in %(job_ids)s. Running and finished jobs are left
-- alone. Returns the ids cancelled (the caller settles their dependents).
UPDATE dbqueue_job
SET state = 'cancelled', finished_at = %(now)s
WHERE id IN (SELECT value FROM json_each(%(job_ids)s))
  AND state IN ('ready', 'waiting')
RETURNING id;

-- name: request_cancel
-- Mark the running jobs in %(job_ids)s for cancellation (the first request's time is
-- kept); their heartbeat reads the mark from renew. Ready and finished jobs are left
-- alone. Returns the ids marked.
UPDATE dbqueue_job
SET cancel_requested_at = COALESCE(cancel_requested_at, %(now)s)
WHERE id IN (SELECT value FROM json_each(%(job_ids)s))
  AND state = 'running'
RETURNING id;

-- name: cancel_running
-- End the leased job cancelled, with %(errors)s as its history (the cancellation
-- appended), because its task stopped on a cancel request. Applies only while the lease
-- is the caller's and live.
UPDATE dbqueue_job
SET state = 'cancelled', worker_id = NULL, lease_until = NULL, finished_at = %(now)s,
    last_error_code = %(code)s, last_error = %(last_error)s, errors = json(%(errors)s)
WHERE id = %(job_id)s
  AND state = 'running' AND worker_id = %(worker_id)s AND lease_token = %(lease_token)s
  AND lease_until > %(now)s
RETURNING id;

-- name: lock_dependencies
-- The jobs in %(job_ids)s that a job being enqueued will depend on, with their states. The
-- enqueue's transaction holds the database write lock already (BEGIN IMMEDIATE, as
-- dbqueue.W005 asks), so none can finish between this read and the edge's commit. Ids
-- that match no job are missing from the result.
SELECT id, state FROM dbqueue_job
WHERE id IN (SELECT value FROM json_each(%(job_ids)s))
ORDER BY id;

-- name: insert_dependencies
-- Write the edges in %(rows)s (JSON [{job_id, depends_on_id, position, on_failure, state}]).
INSERT INTO dbqueue_dependency (job_id, depends_on_id, position, on_failure, state)
SELECT json_extract(value, '$.job_id'), json_extract(value, '$.depends_on_id'),
       json_extract(value, '$.position'), json_extract(value, '$.on_failure'),
       json_extract(value, '$.state')
FROM json_each(%(rows)s)
ORDER BY key;

-- name: settle_edges
-- The jobs in %(finished)s (JSON [{id, failed}]) have just finished, failed meaning dead or
-- cancelled: settle their pending edges, resolved, or failed where a failure cancels the
-- dependent. Returns, per dependent (in id order), how many edges were resolved and the
-- lowest dependency among those that failed (NULL: none): the first statement reads them,
-- the second settles the same edges (the write lock is held between the two; the block's
-- result is the first one's rows, the update returning none).
WITH finished AS (
    SELECT json_extract(value, '$.id') AS id, max(json_extract(value, '$.failed')) AS failed
    FROM json_each(%(finished)s)
    GROUP BY 1
),
marked AS (
    SELECT e.job_id, e.depends_on_id,
           CASE WHEN f.failed AND e.on_failure = 'cancel' THEN 'failed'
                ELSE 'resolved' END AS state
    FROM finished AS f
    JOIN dbqueue_dependency AS e ON e.depends_on_id = f.id
    WHERE e.state = 'pending'
)
SELECT job_id, count(*) FILTER (WHERE state = 'resolved') AS resolved,
       min(depends_on_id) FILTER (WHERE state = 'failed') AS failed_by
FROM marked
GROUP BY job_id
ORDER BY job_id;
WITH finished AS (
    SELECT json_extract(value, '$.id') AS id, max(json_extract(value, '$.failed')) AS failed
    FROM json_each(%(finished)s)
    GROUP BY 1
)
UPDATE dbqueue_dependency
SET state = CASE WHEN f.failed AND on_failure = 'cancel' THEN 'failed' ELSE 'resolved' END
FROM finished AS f
WHERE dbqueue_dependency.depends_on_id = f.id AND dbqueue_dependency.state = 'pending';

-- name: reopen_edges
-- The dead jobs in %(job_ids)s were requeued: their failed edges are pending again.
-- Returns the dependents those edges held, in id order: the first statement reads them,
-- the second reopens the same edges (the write lock is held between the two; the block's
-- result is the first one's rows, the update returning none).
SELECT DISTINCT job_id FROM dbqueue_dependency
WHERE depends_on_id IN (SELECT value FROM json_each(%(job_ids)s)) AND state = 'failed'
ORDER BY job_id;
UPDATE dbqueue_dependency SET state = 'pending'
WHERE depends_on_id IN (SELECT value FROM json_each(%(job_ids)s)) AND state = 'failed';

-- name: lock_dependents
-- The jobs in %(job_ids)s in id order (the write lock is the database's, held already);
-- return what settling them needs: state, pending count, error history and last error
-- code, how many of their edges stand failed, dedupe key, and the clock (UTC) to stamp a
-- history entry with.
SELECT j.id, j.state, j.pending_dependencies, j.errors, j.last_error_code, j.task,
       j.dedupe_key,
       (SELECT count(*) FROM dbqueue_dependency AS e
        WHERE e.job_id = j.id AND e.state = 'failed') AS failed_edges,
       dbqueue_utc_now() AS clock
FROM dbqueue_job AS j
WHERE j.id IN (SELECT value FROM json_each(%(job_ids)s))
ORDER BY j.id;

-- name: update_dependents
-- Write what settling decided for each dependent in %(rows)s (JSON [{id, resolved, state,
-- code, last_error, errors}]: pending count lowered by resolved; the state; the error
-- fields, unchanged where null). finished_at follows the state: cleared when it is
-- waiting or ready, stamped when it becomes terminal. Returns each job's id, state and
-- queue. (%(channel)s: no NOTIFY on SQLite.)
WITH settled AS (
    SELECT json_extract(value, '$.id') AS id,
           json_extract(value, '$.resolved') AS resolved,
           json_extract(value, '$.state') AS state,
           json_extract(value, '$.code') AS code,
           json_extract(value, '$.last_error') AS last_error,
           json_extract(value, '$.errors') AS errors
    FROM json_each(%(rows)s)
)
UPDATE dbqueue_job
SET pending_dependencies = dbqueue_job.pending_dependencies - r.resolved,
    state = r.state,
    finished_at = CASE WHEN r.state IN ('waiting', 'ready') THEN NULL
                       WHEN r.state = dbqueue_job.state THEN dbqueue_job.finished_at
                       ELSE %(now)s END,
    last_error_code = COALESCE(r.code, dbqueue_job.last_error_code),
    last_error = COALESCE(r.last_error, dbqueue_job.last_error),
    errors = COALESCE(r.errors, dbqueue_job.errors)
FROM settled AS r
WHERE dbqueue_job.id = r.id
RETURNING dbqueue_job.id, dbqueue_job.state, dbqueue_job.queue;

-- name: workflow_jobs
-- The ids of every job linked to job %(job_id)s through dependencies, either way (its
-- workflow), itself included, at most %(limit)s of them, lowest first.
WITH RECURSIVE linked(id) AS (
    SELECT %(job_id)s
    UNION
    SELECT e.depends_on_id FROM linked AS l JOIN dbqueue_dependency AS e ON e.job_id = l.id
    UNION
    SELECT e.job_id FROM linked AS l JOIN dbqueue_dependency AS e ON e.depends_on_id = l.id
)
SELECT id FROM linked ORDER BY id LIMIT %(limit)s;
