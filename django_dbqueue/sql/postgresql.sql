-- Named statements of the lease protocol for PostgreSQL.
-- Every deadline is measured by the database clock (clock_timestamp()) after the row
-- lock is held, so worker clocks never decide who owns a job. Structured parameters
-- arrive as JSON text. Batches reach their job rows by `id = ANY (ARRAY(...))`: a
-- primary-key index scan whatever the planner guesses of the batch's size (a prepared
-- statement's generic plan knows nothing of it), and the ARRAY subquery runs first, so a
-- batch's row locks are held before any of its rows is checked against the clock.
-- A statement on jobs it names by id checks that a job is running on the row version
-- its lock returned (`locked`'s own state), never as `state = 'running'` on the rows it
-- reads: that condition would let the plan read every running job through the running
-- jobs' partial index, which statistics taken while few jobs ran call nearly empty, and
-- filter them down to the ids named, a cost that grows with every job running on every
-- worker.
-- Finished jobs move out of dbqueue_job into history tables that inherit it (migration
-- 0023, history.py): a statement on jobs that are not finished reads ONLY dbqueue_job, so
-- it never plans nor reads the history; one that must find a job in any state reads
-- dbqueue_job, which includes the history tables.

-- name: worker_session
-- Set up a connection the worker owns (claims, completions, renewals, reaping): no JIT,
-- whose compilation costs a claim more than running it; generic plans for its prepared
-- statements, since the plan cache would otherwise plan the claim afresh on every call
-- (its custom plans look cheaper than the generic one), and planning is most of a claim;
-- and asynchronous commit when %(synchronous_commit)s is 'off' (NULL keeps the server's
-- setting).
SELECT set_config('jit', 'off', false),
       set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('synchronous_commit',
                  COALESCE(%(synchronous_commit)s, current_setting('synchronous_commit')), false);

-- name: listen_session
-- Set up the worker's LISTEN connection: exempt from idle_session_timeout (PostgreSQL 14+;
-- a no-op before), since it sits idle by design and a closed one misses wake-ups until it
-- is back. Only this session's setting changes, never the server's.
SELECT set_config(name, '0', false) FROM pg_settings WHERE name = 'idle_session_timeout';

-- name: reset_session
-- Give a job thread's connection, kept from job to job (CONN_MAX_AGE), a fresh session
-- after task code used it: role and session authorization, every setting (search_path,
-- time zone...), advisory locks, temporary tables, prepared statements, cursors and
-- LISTENs all go back to how a new connection starts (the caller then re-applies
-- Django's own set-up). Outside any transaction only; never behind a transaction-mode
-- pool, where the server session is not this client's.
DISCARD ALL;

-- name: notify_probe
-- The listener's probe: one NOTIFY on %(channel)s with %(payload)s (no queue's name), sent
-- as enqueue sends its wake-ups, so hearing it shows that this worker's wake-ups arrive.
SELECT pg_notify(%(channel)s, %(payload)s) AS notified;

-- name: insert_jobs
-- Insert one job per element of %(rows)s (a JSON array of {"args", "kwargs"}), all with
-- the same options, ids increasing in input order: %(state)s ready, or waiting for
-- %(pending_dependencies)s jobs (whose edges insert_dependencies writes next). A row whose (task, dedupe_key)
-- matches an active job is skipped, never an error, so the caller's transaction stays
-- usable. ON CONFLICT names the active dedupe index, so any other conflict is an error:
-- an id the sequence hands out that a row holds already (a table restored with its ids
-- but not its sequence) fails the statement, whole, instead of skipping the job. With
-- %(notify)s, listeners on %(channel)s hear of the queue when the transaction commits
-- (the caller notifies once per queue and transaction). Every row of the statement has
-- the same created_at and run_at, so only the first row (lowest id) returns them; the
-- others return NULL there, which the driver reads for free.
WITH inserted AS (
    INSERT INTO dbqueue_job (
        queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts,
        lease_token, lease_seconds, created_at, dedupe_key, serial_key, subject_type_id,
        subject_id, backend, last_worker_id, last_error_code, last_error, errors, meta,
        pending_dependencies, limit_key, limit_size, limit_rate
    )
    SELECT
        %(queue)s, %(task)s, item.value -> 'args', item.value -> 'kwargs', %(state)s,
        %(priority)s,
        COALESCE(%(run_at)s::timestamptz,
                 statement_timestamp() + make_interval(secs => %(delay)s)),
        0, %(max_attempts)s, 0, %(lease_seconds)s, statement_timestamp(), %(dedupe_key)s,
        %(serial_key)s, %(subject_type_id)s, %(subject_id)s, %(backend)s, '', '', '',
        '[]'::jsonb, %(meta)s::jsonb, %(pending_dependencies)s, %(limit_key)s, %(limit_size)s,
        %(limit_rate)s
    FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS item(value, position)
    ORDER BY item.position
    ON CONFLICT (task, dedupe_key)
        WHERE dedupe_key IS NOT NULL AND state IN ('waiting', 'ready', 'running')
    DO NOTHING
    RETURNING id, created_at, run_at
),
first AS (SELECT min(id) AS id FROM inserted)
SELECT inserted.id,
       CASE WHEN inserted.id = first.id THEN inserted.created_at END AS created_at,
       CASE WHEN inserted.id = first.id THEN inserted.run_at END AS run_at,
       CASE WHEN inserted.id = first.id AND %(notify)s
            THEN pg_notify(%(channel)s, %(queue)s) END AS notified
FROM inserted CROSS JOIN first;

-- name: insert_job
-- insert_jobs for a single call (%(rows)s holds one element): the same row, the same
-- skipped duplicate and the same NOTIFY, in a statement that plans in half the time.
INSERT INTO dbqueue_job (
    queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts,
    lease_token, lease_seconds, created_at, dedupe_key, serial_key, subject_type_id,
    subject_id, backend, last_worker_id, last_error_code, last_error, errors, meta,
    pending_dependencies, limit_key, limit_size, limit_rate
) VALUES (
    %(queue)s, %(task)s, %(rows)s::jsonb -> 0 -> 'args', %(rows)s::jsonb -> 0 -> 'kwargs',
    %(state)s, %(priority)s,
    COALESCE(%(run_at)s::timestamptz, statement_timestamp() + make_interval(secs => %(delay)s)),
    0, %(max_attempts)s, 0, %(lease_seconds)s, statement_timestamp(), %(dedupe_key)s,
    %(serial_key)s, %(subject_type_id)s, %(subject_id)s, %(backend)s, '', '', '', '[]'::jsonb,
    %(meta)s::jsonb, %(pending_dependencies)s, %(limit_key)s, %(limit_size)s, %(limit_rate)s
)
ON CONFLICT (task, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND state IN ('waiting', 'ready', 'running')
DO NOTHING
RETURNING id, created_at, run_at,
          CASE WHEN %(notify)s THEN pg_notify(%(channel)s, %(queue)s) END AS notified;

-- name: insert_job_call
-- insert_job, from dbqueue_enqueue_job (migration 0025): the same row, the same skipped
-- duplicate (no row) and the same NOTIFY. PL/pgSQL plans the function's INSERT once per
-- session, so unprepared (Django's default) this call parses in a fraction of the time
-- insert_job's INSERT takes to parse and plan; but its first call in a session loads
-- PL/pgSQL and compiles the function, which costs as much as a dozen such savings, so a
-- connection sends insert_job until it has enqueued a few jobs (enqueue.single_insert).
-- %(shape)s holds insert_job's other parameters (all but the call and %(notify)s) as one
-- JSON object keyed by their names: three parameters parse and bind in less time than 22.
SELECT job_id AS id, job_created_at AS created_at, job_run_at AS run_at
FROM dbqueue_enqueue_job(%(shape)s::jsonb, %(rows)s::jsonb -> 0, %(notify)s::boolean);

-- name: claim
-- Lease up to %(limit)s due ready jobs of the queues in %(queues)s (NULL: every queue with
-- ready jobs). Rows locked by other transactions are skipped, never awaited. The batch is
-- shared across queues in turn (%(turn)s rotates who goes first), each queue in priority
-- order, and every queue's candidates come from the ready index. A job with a serial key
-- waits while an earlier job (lower id) with that key is ready or running, or any job with
-- that key runs (a requeued one included), so jobs of one key run one at a time, in
-- enqueue order. Each claimed row gets attempts + 1,
-- lease_token + 1, the worker id and a lease from the database clock.
-- One statement, two paths, and exactly one runs: each is gated by `shape.plain`, an
-- uncorrelated subquery the planner makes a one-time filter, so the other path's plan is
-- never executed. `shape` holds the plain shape: one queue (the only one named, or for
-- NULL the first of the ready index when it is also the last: every ready job is in it)
-- and no job with a serial key ready or running anywhere (the first entry of the active
-- serial-key index, empty unless serial keys are in use, asked for in index order so that
-- the index is read, not the table, however many keys are active): a few one-row index
-- probes, read once each (OFFSET 0 keeps them out of the CASEs that use them twice) before
-- any row is locked. The plain path then leases exactly what the
-- general one would: with one queue there is no turn to take, and without an active
-- serial key no candidate has an earlier job of its key to wait for. It reads the ready
-- index in order and nothing else, and leases keyless rows only, so a keyed job committed
-- after the probe is left to the general path of a later claim: the serial-key guarantee
-- never depends on the probe's timing. A paused queue (dbqueue_queue_pause, pauses.py):
-- the general path leaves out every queue whose pause is in force, so the others fill the
-- batch; then, on either path, the clock is read once for started_at (claimed_at, after
-- the statement's snapshot: a job starts after what that snapshot saw finish, as serial
-- keys need) and only then dbqueue_paused_queues(started_at) reads the pauses with a
-- snapshot of its own (a VOLATILE PL/pgSQL function, migration 0017); the UPDATE leaves out
-- the jobs of those queues, which stay ready. So a claim that missed a pause's commit read
-- its clock before that commit: no job of a paused queue starts after the pause committed.
-- With no pause, that check is one call reading an empty table.
-- The general path discovers the queues, takes each
-- one's candidates and shares the batch in turn. Keyless candidates come from the keyless
-- part of the ready index (dbqueue_job_ready_keyless), so keyed jobs are never walked past.
-- Keyed candidates are the first job of each serial key only (ready, due, in a served
-- queue, no job of its key running). They are looked for first in claim order, in the
-- keyed part of the ready index (dbqueue_job_ready_serial), %(serial_window)s jobs per queue
-- at most (10 x %(limit)s: leases.SERIAL_WINDOW), each checked by an index probe. Only when
-- that finds fewer than %(limit)s in a queue whose keyed jobs go on (a deep key ahead, say) are the keys with an active job
-- walked, one index probe each (a loose scan of the active serial-key index), taking each
-- key's first active job (lowest id). So a claim of 10 reads at most 100 keyed rows per
-- queue plus, in that case, one row per active key, however many jobs wait on each key:
-- 100,000 jobs on one key cost it 1 ms, as do 100,000 keys of one job each.
-- Limited jobs (limit_key: limits.py) are out of the keyless index; shape.limited says
-- whether any is ready (the first entry of dbqueue_job_ready_limited, empty unless limits
-- are in use, asked for in index order: an EXISTS was planned as a scan of the table when
-- most ready jobs were limited, walking the finished rows before the first of them) and the
-- plain path requires none. The limited path is one call, behind that probe's one-time
-- filter, of dbqueue_limited_candidates (migration 0020), so a claim with no ready limited
-- job initialises that call and one primary-key probe (seen) instead of the path's dozen
-- nodes, and PL/pgSQL plans the function's statements once per session: it walks the
-- limits with ready jobs (one index probe each), takes each one's first due job in a
-- served queue where a fresh snapshot shows a free slot, and then,
-- in claim order and at most %(serial_window)s of them, admits each limit through
-- dbqueue_limit_room (the limit's advisory lock, taken without waiting, then its running jobs
-- and pace read with a snapshot of their own: migration 0019) until the rooms admitted
-- cover %(limit)s: a limit another claim holds admits nothing and the next one is asked, so
-- claimers neither wait for each other nor leave free slots to them. Each admitted limit
-- gives up to its room of its jobs, locked FOR UPDATE SKIP LOCKED with a snapshot taken
-- after its lock. The lock is held to the commit, and each job of a rate limit the UPDATE
-- starts moves its limit's due time on by one period (dbqueue_pace, called by the CASE
-- that sets started_at, for those rows only: the plain path never reads
-- dbqueue_rate_bucket): the next claim of that limit counts and paces what this one
-- started. The function reads with snapshots fresher than the statement's, so it may lock
-- a job made ready since (requeued, reaped, released by its workflow): the UPDATE would meet
-- that job's older version first and compute its new values from it (a dead job's spent
-- budget failing the CHECK, a pace moved on twice), so limited_chosen keeps only the jobs
-- ready and due in the statement's snapshot too (seen, one primary-key probe each); the
-- others stay ready for the next claim. claimed_at is read after the admissions, so a
-- job's started_at comes after the finish its slot waited for.
WITH RECURSIVE shape AS MATERIALIZED (
    SELECT CASE WHEN %(queues)s::jsonb IS NULL THEN ready.first
                WHEN jsonb_array_length(%(queues)s::jsonb) = 1 THEN %(queues)s::jsonb ->> 0
           END AS queue,
           CASE WHEN %(queues)s::jsonb IS NULL THEN ready.first IS NOT DISTINCT FROM ready.last
                ELSE jsonb_array_length(%(queues)s::jsonb) = 1 END
           AND (
               SELECT serial_key FROM ONLY dbqueue_job
               WHERE state IN ('ready', 'running') AND serial_key IS NOT NULL
               ORDER BY serial_key
               LIMIT 1
           ) IS NULL
           AND NOT ready.limited AS plain,
           ready.limited
    FROM (
        SELECT (SELECT min(queue) FROM ONLY dbqueue_job WHERE state = 'ready') AS first,
               (SELECT max(queue) FROM ONLY dbqueue_job WHERE state = 'ready') AS last,
               (
                   SELECT limit_key FROM ONLY dbqueue_job
                   WHERE state = 'ready' AND limit_key IS NOT NULL
                   ORDER BY limit_key
                   LIMIT 1
               ) IS NOT NULL AS limited
        OFFSET 0
    ) ready
),
plain_chosen AS (
    SELECT id FROM ONLY dbqueue_job p
    WHERE (SELECT plain FROM shape)
      AND state = 'ready' AND queue = (SELECT queue FROM shape)
      AND run_at <= statement_timestamp() AND serial_key IS NULL AND limit_key IS NULL
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
ready_queue AS (
    SELECT min(queue) AS queue FROM ONLY dbqueue_job WHERE state = 'ready'
    UNION ALL
    SELECT (SELECT min(j.queue) FROM ONLY dbqueue_job j WHERE j.state = 'ready' AND j.queue > r.queue)
    FROM ready_queue r
    WHERE r.queue IS NOT NULL
),
served AS (
    SELECT queue FROM (
        SELECT value AS queue FROM jsonb_array_elements_text(%(queues)s::jsonb)
        UNION
        SELECT queue FROM ready_queue WHERE queue IS NOT NULL AND %(queues)s::jsonb IS NULL
    ) named
    WHERE NOT EXISTS (
        SELECT 1 FROM dbqueue_queue_pause p
        WHERE p.queue = named.queue AND (p.until IS NULL OR p.until > statement_timestamp())
    )
),
serial_in_order AS (
    SELECT c.id, s.queue, c.priority, c.run_at,
           c.id = (
               SELECT e.id FROM ONLY dbqueue_job e
               WHERE e.state IN ('ready', 'running') AND e.serial_key = c.serial_key
               ORDER BY e.serial_key, e.id
               LIMIT 1
           ) AND (
               SELECT r.serial_key FROM ONLY dbqueue_job r
               WHERE r.state = 'running' AND r.serial_key = c.serial_key
               ORDER BY r.serial_key
               LIMIT 1
           ) IS NULL AS first_of_key
    FROM served s
    CROSS JOIN LATERAL (
        SELECT id, serial_key, priority, run_at FROM ONLY dbqueue_job q
        WHERE state = 'ready' AND queue = s.queue AND run_at <= statement_timestamp()
          AND serial_key IS NOT NULL
        ORDER BY priority DESC, run_at, id
        LIMIT %(serial_window)s
    ) c
),
serial_walk AS MATERIALIZED (
    SELECT EXISTS (
        SELECT 1 FROM serial_in_order
        GROUP BY queue
        HAVING count(*) = %(serial_window)s AND count(*) FILTER (WHERE first_of_key) < %(limit)s
    ) AS needed
),
serial_key_walk AS (
    SELECT (
        SELECT min(serial_key) FROM ONLY dbqueue_job
        WHERE state IN ('ready', 'running') AND serial_key IS NOT NULL
    ) AS serial_key
    WHERE (SELECT needed FROM serial_walk)
    UNION ALL
    SELECT (
        SELECT min(j.serial_key) FROM ONLY dbqueue_job j
        WHERE j.state IN ('ready', 'running') AND j.serial_key > w.serial_key
    )
    FROM serial_key_walk w
    WHERE w.serial_key IS NOT NULL
),
serial_head AS (
    SELECT id, queue,
           row_number() OVER (PARTITION BY queue ORDER BY priority DESC, run_at, id) AS rank
    FROM (
        SELECT id, queue, priority, run_at FROM serial_in_order WHERE first_of_key
        UNION
        SELECT h.id, h.queue, h.priority, h.run_at
        FROM serial_key_walk w
        CROSS JOIN LATERAL (
            SELECT id, state, queue, priority, run_at FROM ONLY dbqueue_job
            WHERE state IN ('ready', 'running') AND serial_key = w.serial_key
            ORDER BY serial_key, id
            LIMIT 1
        ) h
        WHERE w.serial_key IS NOT NULL
          AND h.state = 'ready' AND h.run_at <= statement_timestamp()
          AND h.queue IN (SELECT queue FROM served)
          AND (
              SELECT r.serial_key FROM ONLY dbqueue_job r
              WHERE r.state = 'running' AND r.serial_key = w.serial_key
              ORDER BY r.serial_key
              LIMIT 1
          ) IS NULL
    ) head
),
serial_chosen AS (
    SELECT id, queue, priority, run_at FROM ONLY dbqueue_job k
    WHERE id = ANY (ARRAY(SELECT id FROM serial_head WHERE rank <= %(limit)s))
      AND state = 'ready'
    FOR UPDATE SKIP LOCKED
),
keyless_chosen AS (
    SELECT c.id, s.queue, c.priority, c.run_at
    FROM served s
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM ONLY dbqueue_job g
        WHERE state = 'ready' AND queue = s.queue AND run_at <= statement_timestamp()
          AND serial_key IS NULL AND limit_key IS NULL
        ORDER BY priority DESC, run_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) c
    WHERE NOT (SELECT plain FROM shape)
),
limited_chosen AS (
    SELECT c.job_id AS id, c.job_queue AS queue, c.job_priority AS priority,
           c.job_run_at AS run_at
    FROM dbqueue_limited_candidates(
        ARRAY(SELECT queue FROM served), %(limit)s::integer, %(serial_window)s::integer
    ) c
    CROSS JOIN LATERAL (
        SELECT 1 FROM ONLY dbqueue_job v
        WHERE v.id = c.job_id AND v.state = 'ready' AND v.run_at <= statement_timestamp()
        LIMIT 1
    ) seen
    WHERE (SELECT limited FROM shape)
),
candidate AS (
    SELECT id, queue,
           row_number() OVER (PARTITION BY queue ORDER BY priority DESC, run_at, id) AS rank
    FROM (
        SELECT id, queue, priority, run_at FROM keyless_chosen
        UNION ALL
        SELECT id, queue, priority, run_at FROM serial_chosen
        UNION ALL
        SELECT id, queue, priority, run_at FROM limited_chosen
    ) c
),
chosen AS (
    SELECT id FROM plain_chosen
    UNION ALL
    (SELECT id FROM (
        SELECT id, rank, dense_rank() OVER (ORDER BY queue) AS position FROM candidate
    ) ranked
    ORDER BY rank, mod(position - 1 + %(turn)s, (SELECT count(DISTINCT queue) FROM candidate))
    LIMIT %(limit)s)
),
claimed_at AS MATERIALIZED (
    SELECT clock_timestamp() AS at FROM (SELECT count(*) FROM limited_chosen) admitted
),
paused AS MATERIALIZED (
    SELECT dbqueue_paused_queues(at) AS queues FROM claimed_at
)
UPDATE ONLY dbqueue_job j
SET state = 'running',
    attempts = j.attempts + 1,
    lease_token = j.lease_token + 1,
    worker_id = %(worker_id)s,
    last_worker_id = %(worker_id)s,
    lease_until = clock_timestamp() + make_interval(secs => j.lease_seconds),
    started_at = CASE
        WHEN j.limit_rate IS NULL THEN (SELECT at FROM claimed_at)
        WHEN dbqueue_pace(j.limit_key, j.limit_rate, (SELECT at FROM claimed_at))
            THEN (SELECT at FROM claimed_at)
    END
WHERE j.id = ANY (ARRAY(SELECT id FROM chosen))
  AND NOT j.queue = ANY ((SELECT queues FROM paused)::text[])
RETURNING j.id, j.lease_token, j.task, j.args, j.kwargs, j.attempts, j.max_attempts,
          j.lease_until, j.lease_seconds, j.queue, j.priority, j.run_at, j.backend, j.meta;

-- name: claim_jobs
-- Lease the jobs of %(job_ids)s (a JSON array of ids) that are ready, due or not: eager mode
-- runs the jobs a commit enqueued, and their retries at once. Rows locked by other
-- transactions are skipped, never awaited; priority and serial keys are not consulted (the
-- caller names the jobs). Each claimed row gets what a claim gives it.
WITH chosen AS (
    SELECT id FROM ONLY dbqueue_job
    WHERE id = ANY (ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)))
      AND state = 'ready'
    FOR UPDATE SKIP LOCKED
)
UPDATE ONLY dbqueue_job j
SET state = 'running',
    attempts = j.attempts + 1,
    lease_token = j.lease_token + 1,
    worker_id = %(worker_id)s,
    last_worker_id = %(worker_id)s,
    lease_until = clock_timestamp() + make_interval(secs => j.lease_seconds),
    started_at = clock_timestamp()
WHERE j.id = ANY (ARRAY(SELECT id FROM chosen))
RETURNING j.id, j.lease_token, j.task, j.args, j.kwargs, j.attempts, j.max_attempts,
          j.lease_until, j.lease_seconds, j.queue, j.priority, j.run_at, j.backend, j.meta;

-- name: next_due
-- Seconds from the database clock until the next ready job of %(queues)s (NULL: every queue)
-- that is not due yet becomes due, or NULL when there is none. Jobs already due are left
-- out: a claim just passed them by (locked by another worker, or waiting behind a serial
-- key). The ready index leads with (queue, priority), so each queue's priorities are walked
-- from the highest down (one index probe per priority present) and each priority's next
-- run_at is the first entry after the clock: a handful of probes whatever the backlog.
-- A pause of a served queue that ends by itself (until) is due then too: its jobs are
-- claimable from that moment. So is the next start of a rate-limited limit with due jobs
-- (dbqueue_rate_bucket: its due_at less the burst, the moment dbqueue_limit_room admits
-- one again); the table holds a row per limit paced in the last hour (the reaper's sweep).
WITH RECURSIVE ready_queue AS (
    SELECT min(queue) AS queue FROM ONLY dbqueue_job WHERE state = 'ready'
    UNION ALL
    SELECT (SELECT min(j.queue) FROM ONLY dbqueue_job j WHERE j.state = 'ready' AND j.queue > r.queue)
    FROM ready_queue r
    WHERE r.queue IS NOT NULL
),
served AS (
    SELECT value AS queue FROM jsonb_array_elements_text(%(queues)s::jsonb)
    UNION
    SELECT queue FROM ready_queue WHERE queue IS NOT NULL AND %(queues)s::jsonb IS NULL
),
level AS (
    SELECT s.queue,
           (SELECT max(j.priority) FROM ONLY dbqueue_job j
            WHERE j.state = 'ready' AND j.queue = s.queue) AS priority
    FROM served s
    UNION ALL
    SELECT l.queue,
           (SELECT max(j.priority) FROM ONLY dbqueue_job j
            WHERE j.state = 'ready' AND j.queue = l.queue AND j.priority < l.priority)
    FROM level l
    WHERE l.priority IS NOT NULL
)
SELECT extract(epoch FROM min(due.at) - clock_timestamp())::float8 AS seconds
FROM (
    SELECT earliest.run_at AS at
    FROM level l
    CROSS JOIN LATERAL (
        SELECT min(j.run_at) AS run_at FROM ONLY dbqueue_job j
        WHERE j.state = 'ready' AND j.queue = l.queue AND j.priority = l.priority
          AND j.run_at > clock_timestamp()
    ) earliest
    WHERE l.priority IS NOT NULL
    UNION ALL
    SELECT p.until FROM dbqueue_queue_pause p
    WHERE p.until > clock_timestamp()
      AND (%(queues)s::jsonb IS NULL OR p.queue IN (
          SELECT value FROM jsonb_array_elements_text(%(queues)s::jsonb)
      ))
    UNION ALL
    SELECT paced.at FROM (
        SELECT b.limit_key,
               b.due_at - make_interval(secs => (greatest(1, floor(b.rate / 10)) - 1) / b.rate) AS at
        FROM dbqueue_rate_bucket b
    ) paced
    WHERE paced.at > clock_timestamp()
      AND EXISTS (
          SELECT 1 FROM ONLY dbqueue_job j
          WHERE j.state = 'ready' AND j.limit_key = paced.limit_key
            AND j.run_at <= clock_timestamp()
            AND (%(queues)s::jsonb IS NULL OR j.queue IN (
                SELECT value FROM jsonb_array_elements_text(%(queues)s::jsonb)
            ))
      )
) due;

-- name: pause_queues
-- Pause the queues of %(queues)s (a JSON array of names): from this transaction's commit
-- on, no claim takes their jobs. paused_at is the database clock's; until is
-- %(seconds)s on (NULL: until resumed). A queue paused already takes the new values.
INSERT INTO dbqueue_queue_pause (queue, paused_at, until, paused_by)
SELECT named.value, clock.now, clock.now + make_interval(secs => %(seconds)s::float8), %(actor)s
FROM (SELECT clock_timestamp() AS now) clock
CROSS JOIN jsonb_array_elements_text(%(queues)s::jsonb) named
ON CONFLICT (queue) DO UPDATE
SET paused_at = EXCLUDED.paused_at, until = EXCLUDED.until, paused_by = EXCLUDED.paused_by
RETURNING queue, paused_at, until, paused_by;

-- name: resume_queues
-- Resume the paused queues of %(queues)s (NULL: every paused queue), returning their names;
-- listeners on %(channel)s hear of each queue at the commit, so idle workers claim at once.
WITH resumed AS (
    DELETE FROM dbqueue_queue_pause
    WHERE %(queues)s::jsonb IS NULL OR queue IN (
        SELECT value FROM jsonb_array_elements_text(%(queues)s::jsonb)
    )
    RETURNING queue
)
SELECT queue, pg_notify(%(channel)s, queue) AS notified FROM resumed ORDER BY queue;

-- name: renew
-- Extend each lease in %(leases)s (JSON [{job_id, lease_token, worker_id}]) by its job's
-- lease_seconds from the database clock. Applies only to rows still running under that
-- (worker_id, lease_token) with lease_until ahead of the clock, checked once the row lock
-- is held. A row another transaction holds locked is skipped, never awaited, so one lock
-- cannot stall the batch; the lock taken is the one the UPDATE takes anyway (NO KEY
-- UPDATE), so an enqueue holding a dependency's row in KEY SHARE (lock_dependencies) does
-- not hold its renewal back. Returns the ids still owned, each with the time an operator
-- asked it to stop (NULL: not asked), and the ids skipped (skipped true): renew those later.
WITH lease AS (
    SELECT * FROM jsonb_to_recordset(%(leases)s::jsonb)
        AS l(job_id bigint, lease_token bigint, worker_id text)
),
locked AS (
    SELECT id, state FROM ONLY dbqueue_job WHERE id = ANY (ARRAY(SELECT job_id FROM lease))
    ORDER BY id FOR NO KEY UPDATE SKIP LOCKED
),
renewed AS (
    UPDATE ONLY dbqueue_job j
    SET lease_until = clock_timestamp() + make_interval(secs => j.lease_seconds)
    FROM lease l
    WHERE j.id = ANY (ARRAY(SELECT id FROM locked WHERE state = 'running')) AND j.id = l.job_id
      AND j.worker_id = l.worker_id AND j.lease_token = l.lease_token
      AND j.lease_until > clock_timestamp()
    RETURNING j.id, j.cancel_requested_at
)
SELECT id, cancel_requested_at, false AS skipped FROM renewed
UNION ALL
SELECT j.id, NULL, true FROM ONLY dbqueue_job j
WHERE j.id = ANY (ARRAY(
    SELECT job_id FROM lease WHERE job_id <> ALL (ARRAY(SELECT id FROM locked))
));

-- name: set_progress
-- Store each report in %(reports)s (JSON [{job_id, lease_token, worker_id, progress}],
-- progress as JSON text) as its job's progress, with "at" set to the database clock (ISO
-- 8601, UTC). Applies only to rows still running under that (worker_id, lease_token) with
-- lease_until ahead of the clock, checked once the row lock is held (NO KEY UPDATE, as for
-- renew). A row another transaction holds locked is skipped, never awaited. Returns the ids
-- written, and the ids skipped (skipped true): write their newest report later.
WITH report AS (
    SELECT * FROM jsonb_to_recordset(%(reports)s::jsonb)
        AS r(job_id bigint, lease_token bigint, worker_id text, progress text)
),
locked AS (
    SELECT id, state FROM ONLY dbqueue_job WHERE id = ANY (ARRAY(SELECT job_id FROM report))
    ORDER BY id FOR NO KEY UPDATE SKIP LOCKED
),
written AS (
    UPDATE ONLY dbqueue_job j
    SET progress = r.progress::jsonb || jsonb_build_object('at',
        to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
    FROM report r
    WHERE j.id = ANY (ARRAY(SELECT id FROM locked WHERE state = 'running')) AND j.id = r.job_id
      AND j.worker_id = r.worker_id AND j.lease_token = r.lease_token
      AND j.lease_until > clock_timestamp()
    RETURNING j.id
)
SELECT id, false AS skipped FROM written
UNION ALL
SELECT j.id, true FROM ONLY dbqueue_job j
WHERE j.id = ANY (ARRAY(
    SELECT job_id FROM report WHERE job_id <> ALL (ARRAY(SELECT id FROM locked))
));

-- name: complete
-- Mark each leased job in %(rows)s (JSON [{job_id, lease_token, worker_id, result}], result
-- as JSON text or null) succeeded with its result. Each row applies only while its lease
-- is the caller's and live by the database clock once the row lock is held. A row another
-- transaction holds locked is skipped, never awaited. Unless %(settles)s (the caller then
-- settles the dependents in the same transaction), a job that other jobs wait for is left
-- running and returned deferred: complete it again with %(settles)s. That is asked once
-- for the batch, of dbqueue_awaited_among (migration 0022), a VOLATILE function, so it reads
-- the edges with a snapshot taken when it is called, after the row locks are held (its
-- argument reads every row of locked first): an enqueue that committed an edge between
-- this statement's start and its lock is seen (a subquery here would not see it). Returns
-- the ids completed, skipped (write those later) and deferred; the others' leases were lost.
-- The skipped and deferred ids are read off the statement's own lists: a job's row is read
-- again (by primary key) only for an id no lock was taken on, to tell a skipped row from a
-- deleted one.
WITH done AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb)
        AS d(job_id bigint, lease_token bigint, worker_id text, result text)
),
locked AS (
    SELECT id, state FROM ONLY dbqueue_job WHERE id = ANY (ARRAY(SELECT job_id FROM done))
    ORDER BY id FOR UPDATE SKIP LOCKED
),
awaited AS MATERIALIZED (
    SELECT unnest(dbqueue_awaited_among(ARRAY(SELECT id FROM locked))) AS id
    WHERE NOT %(settles)s
),
completed AS (
    UPDATE ONLY dbqueue_job j
    SET state = 'succeeded', result = d.result::jsonb, worker_id = NULL, lease_until = NULL,
        finished_at = clock_timestamp()
    FROM done d
    WHERE j.id = ANY (ARRAY(SELECT id FROM locked WHERE state = 'running')) AND j.id = d.job_id
      AND j.worker_id = d.worker_id AND j.lease_token = d.lease_token
      AND j.lease_until > clock_timestamp()
      AND j.id <> ALL (ARRAY(SELECT id FROM awaited))
    RETURNING j.id
)
SELECT id, false AS skipped, false AS deferred FROM completed
UNION ALL
SELECT j.id, true, false FROM ONLY dbqueue_job j
WHERE j.id = ANY (ARRAY(
    SELECT job_id FROM done WHERE job_id <> ALL (ARRAY(SELECT id FROM locked))
))
UNION ALL
SELECT l.id, false, true FROM locked l
WHERE l.id = ANY (ARRAY(SELECT id FROM awaited)) AND l.id <> ALL (ARRAY(SELECT id FROM completed));

-- name: release
-- Hand the leased job back unrun: ready and due now, the attempt refunded, the lease token
-- kept (it never decreases). Applies only while the lease is the caller's and live.
WITH locked AS (SELECT id, state FROM ONLY dbqueue_job WHERE id = %(job_id)s FOR UPDATE)
UPDATE ONLY dbqueue_job j
SET state = 'ready', attempts = j.attempts - 1, worker_id = NULL, lease_until = NULL,
    run_at = clock_timestamp()
FROM locked
WHERE j.id = locked.id
  AND locked.state = 'running' AND j.worker_id = %(worker_id)s AND j.lease_token = %(lease_token)s
  AND j.lease_until > clock_timestamp()
RETURNING j.id;

-- name: database_now
-- The database clock now, for Python code that needs the instant itself: as UTC wall-clock
-- time (no time zone), which the driver returns as it is whatever USE_TZ and TIME_ZONE say.
SELECT clock_timestamp() AT TIME ZONE 'UTC' AS now;

-- name: lock_lease
-- Lock the job if it is still running under (worker_id, lease_token); return its error
-- history so a failure can be appended, and the database clock (UTC wall-clock time, as
-- database_now reads it) to stamp it with. The deadline is checked by record_failures.
-- A row another transaction holds locked is not awaited: NOWAIT fails the statement at
-- once (a transient conflict the caller tries again later), so the writer is not held up.
-- Only a running job holds a worker id (the table's CHECK constraint), so the row
-- locked is the job's while it runs; its state is checked on the locked row (top of file).
WITH locked AS (
    SELECT state, errors FROM ONLY dbqueue_job
    WHERE id = %(job_id)s AND worker_id = %(worker_id)s AND lease_token = %(lease_token)s
    FOR UPDATE NOWAIT
)
SELECT errors, clock_timestamp() AT TIME ZONE 'UTC' AS clock FROM locked
WHERE state = 'running';

-- name: lock_expired
-- Lock up to %(limit)s running jobs whose lease has run out, oldest deadline first, via
-- the running-lease index. Rows another reaper holds are skipped. Each row comes with the
-- database clock (UTC wall-clock time, as database_now reads it), to stamp the expiry with.
SELECT id, lease_token, task, attempts, max_attempts, worker_id, errors, backend,
       clock_timestamp() AT TIME ZONE 'UTC' AS clock
FROM ONLY dbqueue_job
WHERE state = 'running' AND lease_until < statement_timestamp()
ORDER BY lease_until
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: record_failures
-- Record a failed attempt for each row of %(rows)s (JSON [{job_id, lease_token, worker_id,
-- retry_at, retry_in, code, last_error, errors}]): ready again at retry_at, or retry_in
-- seconds after the database clock, or dead when both are null or the attempt budget is
-- spent. With %(expired)s the lease must have run out (the reaper); otherwise it must
-- still be the caller's and live. Both by the database clock, after the row lock is held.
-- Returns the ids and the state each one took. The callers hold the rows locked already
-- (lock_lease, lock_expired): `locked` asks for the lock again, which PostgreSQL finds
-- held, to read each row's state where it cannot steer the plan (top of file).
WITH failed AS (
    SELECT job_id, lease_token, worker_id, code, last_error, errors,
           COALESCE(retry_at, clock_timestamp() + make_interval(secs => retry_in)) AS retry_at
    FROM jsonb_to_recordset(%(rows)s::jsonb) AS f(
        job_id bigint, lease_token bigint, worker_id text, retry_at timestamptz,
        retry_in double precision, code text, last_error text, errors jsonb
    )
),
locked AS (
    SELECT id, state FROM ONLY dbqueue_job WHERE id = ANY (ARRAY(SELECT job_id FROM failed))
    ORDER BY id FOR UPDATE
)
UPDATE ONLY dbqueue_job j
SET state = CASE WHEN r.retry_at IS NULL OR j.attempts >= j.max_attempts
                 THEN 'dead' ELSE 'ready' END,
    run_at = CASE WHEN r.retry_at IS NULL OR j.attempts >= j.max_attempts
                  THEN j.run_at ELSE r.retry_at END,
    finished_at = CASE WHEN r.retry_at IS NULL OR j.attempts >= j.max_attempts
                       THEN clock_timestamp() END,
    worker_id = NULL, lease_until = NULL,
    last_error_code = r.code, last_error = r.last_error, errors = r.errors
FROM failed r
WHERE j.id = ANY (ARRAY(SELECT id FROM locked WHERE state = 'running')) AND j.id = r.job_id
  AND j.lease_token = r.lease_token
  AND CASE WHEN %(expired)s
           THEN j.lease_until < clock_timestamp()
           ELSE j.worker_id = r.worker_id AND j.lease_until > clock_timestamp() END
RETURNING j.id, j.state;

-- name: requeue
-- Give dead jobs in %(job_ids)s %(extra_attempts)s more attempts and make them due now.
-- max_attempts stops at 2147483647 (a 32-bit column): a budget at that limit stays there.
-- Id, attempts, dedupe key and history are kept; a cancel request is cleared. At most one job per (task, dedupe_key)
-- is revived: among the selected dead jobs sharing one, the lowest id, and none while an
-- active job holds it. (The NOT EXISTS alone sees the table as it was before this
-- statement, so two selected dead jobs with one key would both pass it and break the
-- active-dedupe index.) The rows are locked and their state re-checked first. Workers of
-- their queues are notified at commit. Returns the ids requeued, each with whether a
-- failed dependency edge leads from it (held: its failure cancelled jobs that waited).
WITH requested AS (
    SELECT id, task, dedupe_key FROM ONLY dbqueue_job
    WHERE id = ANY (ARRAY(
        SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)
    ))
      AND state = 'dead'
    ORDER BY id
    FOR UPDATE
),
revived AS (
    SELECT r.id FROM requested r
    WHERE r.dedupe_key IS NULL OR (
        NOT EXISTS (
            SELECT 1 FROM requested e
            WHERE e.task = r.task AND e.dedupe_key = r.dedupe_key AND e.id < r.id
        )
        AND NOT EXISTS (
            SELECT 1 FROM ONLY dbqueue_job a
            WHERE a.task = r.task AND a.dedupe_key = r.dedupe_key
              AND a.state IN ('waiting', 'ready', 'running')
        )
    )
),
requeued AS (
    UPDATE ONLY dbqueue_job j
    SET state = 'ready',
        max_attempts = LEAST(j.max_attempts::bigint + %(extra_attempts)s, 2147483647),
        run_at = clock_timestamp(), finished_at = NULL, cancel_requested_at = NULL
    WHERE j.id = ANY (ARRAY(SELECT id FROM revived))
    RETURNING j.id, j.queue
)
SELECT id, pg_notify(%(channel)s, queue),
       EXISTS (SELECT 1 FROM dbqueue_dependency e
               WHERE e.depends_on_id = requeued.id AND e.state = 'failed') AS held
FROM requeued;

-- name: run_now
-- Make the ready jobs in %(job_ids)s that are scheduled in the future due now. Workers of
-- their queues are notified at commit. Returns the ids changed.
WITH moved AS (
    UPDATE ONLY dbqueue_job
    SET run_at = clock_timestamp()
    WHERE id IN (SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb))
      AND state = 'ready' AND run_at > clock_timestamp()
    RETURNING id, queue
)
SELECT id, pg_notify(%(channel)s, queue) FROM moved;

-- name: cancel
-- Cancel the ready and waiting jobs in %(job_ids)s. Running and finished jobs are left
-- alone. The rows are locked FOR UPDATE first, in id order: that waits for an enqueue
-- holding one in KEY SHARE (lock_dependencies) to commit its edge, which a plain UPDATE
-- (NO KEY UPDATE) would not, so the caller's settling sees every edge. Returns the ids
-- cancelled (the caller settles their dependents).
WITH locked AS (
    SELECT id FROM ONLY dbqueue_job
    WHERE id = ANY (ARRAY(
        SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)
    ))
      AND state IN ('ready', 'waiting')
    ORDER BY id
    FOR UPDATE
)
UPDATE ONLY dbqueue_job j
SET state = 'cancelled', finished_at = clock_timestamp()
FROM locked
WHERE j.id = locked.id AND j.state IN ('ready', 'waiting')
RETURNING j.id;

-- name: request_cancel
-- Mark the running jobs in %(job_ids)s for cancellation (the first request's time is
-- kept); their heartbeat reads the mark from renew. Ready and finished jobs are left
-- alone. Returns the ids marked.
WITH locked AS (
    SELECT id, state FROM ONLY dbqueue_job
    WHERE id = ANY (ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)))
    ORDER BY id FOR NO KEY UPDATE
)
UPDATE ONLY dbqueue_job j
SET cancel_requested_at = COALESCE(j.cancel_requested_at, clock_timestamp())
WHERE j.id = ANY (ARRAY(SELECT id FROM locked WHERE state = 'running'))
RETURNING j.id;

-- name: cancel_running
-- End the leased job cancelled, with %(errors)s as its history (the cancellation
-- appended), because its task stopped on a cancel request. Applies only while the lease
-- is the caller's and live by the database clock once the row lock is held.
WITH locked AS (SELECT id, state FROM ONLY dbqueue_job WHERE id = %(job_id)s FOR UPDATE)
UPDATE ONLY dbqueue_job j
SET state = 'cancelled', worker_id = NULL, lease_until = NULL,
    finished_at = clock_timestamp(), last_error_code = %(code)s,
    last_error = %(last_error)s, errors = %(errors)s::jsonb
FROM locked
WHERE j.id = locked.id
  AND locked.state = 'running' AND j.worker_id = %(worker_id)s AND j.lease_token = %(lease_token)s
  AND j.lease_until > clock_timestamp()
RETURNING j.id;

-- name: error_search_state
-- What the admin's search in error text needs (PostgreSQL only): whether the server has
-- pg_trgm to install, whether this database has it, and whether the trigram index that
-- error_search_index builds exists and is valid (an interrupted concurrent build is not).
SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm') AS available,
       EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') AS installed,
       COALESCE((SELECT indisvalid FROM pg_index
                 WHERE indexrelid = to_regclass('dbqueue_job_error_text')), false) AS indexed;

-- name: error_search_ready
-- Whether the admin's search reads error text: the trigram index exists and is valid. Cheap
-- (one catalog row), unlike error_search_state's look at the server's available extensions.
SELECT COALESCE((SELECT indisvalid FROM pg_index
                 WHERE indexrelid = to_regclass('dbqueue_job_error_text')), false) AS indexed;

-- name: error_search_recent
-- The newest %(limit)s jobs, among the newest %(window)s with an error, whose last error
-- upper-cased is LIKE %(pattern)s upper-cased (LIKE-escaped by the caller). Walks
-- dbqueue_job_failed backwards and stops at the limit: a word found in many errors
-- reads about %(limit)s rows.
SELECT id FROM (
    SELECT id, last_error FROM dbqueue_job WHERE last_error <> '' ORDER BY id DESC
    LIMIT %(window)s
) AS recent
WHERE UPPER(last_error) LIKE UPPER(%(pattern)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: error_search_index
-- The trigram index the admin's search in error text reads (PostgreSQL with pg_trgm only):
-- the upper-cased last error of each job that has one, as the search's UPPER(...) LIKE
-- compares it. Built CONCURRENTLY, so run it outside a transaction; a big table takes
-- enqueues and claims all the while.
CREATE INDEX CONCURRENTLY IF NOT EXISTS dbqueue_job_error_text ON dbqueue_job
USING gin (UPPER(last_error) gin_trgm_ops) WHERE last_error <> '';

-- name: table_health
-- The job table's bloat signals (PostgreSQL only), from the server's statistics, never the
-- table: its live and dead rows (the statistics system's estimates, which autovacuum reads),
-- the seconds since it was last vacuumed, and the oldest snapshot that keeps vacuum from removing dead
-- rows younger than it: a session of this database (or a standby's feedback through a
-- WAL sender), a replication slot, or a prepared transaction; this session's own snapshot
-- and autovacuum's (which other vacuums ignore) are left out. A session's state and transaction start read NULL for another role's session
-- unless this role has pg_read_all_stats; its xmin's age reads for everyone. With them, the
-- history tables finished jobs moved to (migration 0023), from the catalogs: how many, their
-- size on disk with indexes and TOAST, and the first day of the oldest one of succeeded jobs.
WITH holders AS (
    SELECT 'session' AS kind, pid, application_name AS holder, state, backend_xmin AS xmin,
           xact_start AS since
    FROM pg_stat_activity
    WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
      AND backend_type <> 'autovacuum worker'
      AND (datname = current_database() OR backend_type = 'walsender')
    UNION ALL
    SELECT 'replication slot', NULL, slot_name, NULL, xmin, NULL
    FROM pg_replication_slots WHERE xmin IS NOT NULL
    UNION ALL
    SELECT 'prepared transaction', NULL, gid, NULL, transaction, prepared
    FROM pg_prepared_xacts WHERE database = current_database()
)
SELECT t.n_live_tup AS live_rows, t.n_dead_tup AS dead_rows,
       EXTRACT(EPOCH FROM clock_timestamp() - GREATEST(t.last_vacuum, t.last_autovacuum))::float8
           AS last_vacuum_age,
       h.kind AS horizon_kind, h.pid AS horizon_pid, h.holder AS horizon_holder,
       h.state AS horizon_state, age(h.xmin) AS horizon_transactions,
       EXTRACT(EPOCH FROM clock_timestamp() - h.since)::float8 AS horizon_seconds,
       s.tables AS history_tables, s.bytes AS history_bytes, s.oldest AS history_oldest
FROM pg_stat_user_tables AS t
LEFT JOIN LATERAL (SELECT * FROM holders ORDER BY age(xmin) DESC LIMIT 1) AS h ON true
CROSS JOIN LATERAL (
    SELECT count(*) AS tables, COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint AS bytes,
           min(to_date(substr(c.relname, 23, 8), 'YYYYMMDD'))
               FILTER (WHERE c.relname ~ '^dbqueue_job_succeeded_[0-9]{8}_[0-9]{8}$') AS oldest
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = t.relid
) AS s
WHERE t.relid = to_regclass('dbqueue_job');

-- name: move_finished
-- Move up to %(limit)s finished jobs that retention keeps (succeeded at %(keep_from)s or
-- later; NULL: all) and that finished at %(after)s or later (NULL: any), oldest finish
-- first, and (in a batch that found fewer) up to %(limit)s dead and %(limit)s cancelled ones
-- finished before %(keep_from)s, out of dbqueue_job into their history tables of
-- %(days)s-day periods (dbqueue_move_finished, migration 0023), creating a missing one. A
-- row another transaction holds is skipped, never awaited. Returns how many moved, and the
-- latest finish time among them (reached: NULL when none moved).
SELECT moved, reached
FROM dbqueue_move_finished(
    %(limit)s, %(days)s, %(keep_from)s::timestamptz, %(after)s::timestamptz
);

-- name: vacuum_job_tables
-- dbqueue_job and its history tables (migration 0023), each with the statement that vacuums
-- and analyzes it: run one at a time, outside a transaction (dbqueue_move_history, once it
-- moved jobs, so the rows it deleted from dbqueue_job leave its indexes now, not when
-- autovacuum next comes round, and the tables it filled have their statistics).
SELECT c.oid::regclass::text AS name, 'VACUUM (ANALYZE) ' || c.oid::regclass::text AS vacuum
FROM pg_class c
WHERE c.oid = 'dbqueue_job'::regclass
   OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'dbqueue_job'::regclass)
ORDER BY c.oid <> 'dbqueue_job'::regclass, c.relname;

-- name: prepare_history
-- Create, where missing, the history tables of the jobs that succeed in the %(days)s-day
-- period holding %(at)s (NULL: the database clock) and in the period after it, and the
-- table of dead and cancelled jobs, so the mover rarely creates one. Returns their names.
SELECT dbqueue_history_table(
    v.state, COALESCE(%(at)s::timestamptz, clock_timestamp()) + make_interval(days => v.ahead),
    %(days)s
)::text AS name
FROM (VALUES ('succeeded', 0), ('succeeded', CAST(%(days)s AS integer)), ('dead', 0))
    AS v(state, ahead);

-- name: retention_cutoff
-- The finish time before which succeeded jobs are deleted, by the database clock, for a
-- retention of %(age)s seconds: the clock less that; or, with %(whole_tables)s and a
-- retention of the %(days)s days of a history table or more, the start of the period
-- holding that instant, so that retention takes whole tables (a job is kept for the
-- retention at least, and at most one period more).
WITH since AS (SELECT clock_timestamp() - make_interval(secs => %(age)s) AS instant)
SELECT CASE WHEN %(whole_tables)s AND %(age)s >= %(days)s * 86400
            THEN (date '1970-01-01'
                  + ((instant AT TIME ZONE 'UTC')::date - date '1970-01-01')
                    / %(days)s * %(days)s)::timestamp AT TIME ZONE 'UTC'
            ELSE instant
       END AS cutoff
FROM since;

-- name: expired_history
-- The history tables of succeeded jobs whose whole period ended by %(cutoff)s, oldest first.
SELECT c.oid::regclass::text AS name
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'dbqueue_job'::regclass
  AND c.relname ~ '^dbqueue_job_succeeded_[0-9]{8}_[0-9]{8}$'
  AND to_date(right(c.relname, 8), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC'
      <= %(cutoff)s::timestamptz
ORDER BY c.relname;

-- name: drop_history
-- Drop the history table %(table)s with its jobs' dependency edges (dbqueue_drop_history,
-- migration 0023). Returns how many jobs it held, or NULL when it was kept: a job of it is
-- still needed by a dependent, or a lock was not granted within a second.
SELECT dbqueue_drop_history(CAST(%(table)s AS regclass)) AS dropped;

-- name: unmoved_finished
-- How many finished jobs in dbqueue_job itself move_finished would move for %(keep_from)s:
-- the succeeded ones retention keeps and the dead or cancelled ones, read through the
-- indexes move_finished reads.
SELECT (SELECT count(*) FROM ONLY dbqueue_job
        WHERE finished_at >= COALESCE(%(keep_from)s::timestamptz, '-infinity'))
     + (SELECT count(*) FROM ONLY dbqueue_job
        WHERE state = 'dead' AND finished_at < %(keep_from)s::timestamptz)
     + (SELECT count(*) FROM ONLY dbqueue_job
        WHERE state = 'cancelled' AND finished_at < %(keep_from)s::timestamptz)
       AS jobs;

-- name: hold_unmoved
-- Lock the jobs in %(job_ids)s that are still in dbqueue_job itself, in id order, until the
-- transaction ends: a move of one under way ends first (its row is then gone from here and
-- a later statement finds it in its history table), and none of them moves meanwhile.
-- Returns their ids.
SELECT id FROM ONLY dbqueue_job
WHERE id = ANY (ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)))
ORDER BY id
FOR UPDATE;

-- name: restore_finished
-- Move the jobs in %(job_ids)s whose state is one of %(states)s back from their history
-- tables into dbqueue_job, id and every field kept, so that a write may make them
-- unfinished (a history table holds finished jobs only). Call after hold_unmoved in the same
-- transaction. Returns their ids.
WITH back AS (
    DELETE FROM dbqueue_job j
    WHERE j.tableoid <> 'dbqueue_job'::regclass
      AND j.id = ANY (ARRAY(
          SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)
      ))
      AND j.state IN (SELECT value FROM jsonb_array_elements_text(%(states)s::jsonb))
    RETURNING j.*
),
restored AS (
    INSERT INTO dbqueue_job SELECT * FROM back RETURNING id
)
SELECT id FROM restored ORDER BY id;

-- name: lock_dependencies
-- The jobs in %(job_ids)s that a job being enqueued will depend on, with their states, held
-- by a share lock until the enqueue's transaction ends: a completion, failure or purge of
-- one of them (which lock it for update) waits for the new edge or skips the row, so none
-- can finish unseen between this read and the edge's commit. Ids that match no job are
-- missing from the result.
SELECT id, state FROM dbqueue_job
WHERE id = ANY (ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)))
ORDER BY id
FOR KEY SHARE;

-- name: insert_dependencies
-- Write the edges in %(rows)s (JSON [{job_id, depends_on_id, position, on_failure, state}]).
INSERT INTO dbqueue_dependency (job_id, depends_on_id, position, on_failure, state)
SELECT job_id, depends_on_id, position, on_failure, state
FROM jsonb_to_recordset(%(rows)s::jsonb)
    AS e(job_id bigint, depends_on_id bigint, position integer, on_failure text, state text);

-- name: settle_edges
-- The jobs in %(finished)s (JSON [{id, failed}]) have just finished, failed meaning dead or
-- cancelled: settle their pending edges, resolved, or failed where a failure cancels the
-- dependent. Returns, per dependent (in id order), how many edges were resolved and the
-- lowest dependency among those that failed (NULL: none). The edges are reached from the
-- ids (= ANY) through dbqueue_dependency_on: a join planned on a guess of the JSON's size
-- reads the whole edge table.
WITH finished AS (
    SELECT * FROM jsonb_to_recordset(%(finished)s::jsonb) AS f(id bigint, failed boolean)
),
marked AS (
    UPDATE dbqueue_dependency e
    SET state = CASE WHEN f.failed AND e.on_failure = 'cancel' THEN 'failed' ELSE 'resolved' END
    FROM finished f
    WHERE e.depends_on_id = ANY (ARRAY(SELECT id FROM finished))
      AND e.depends_on_id = f.id AND e.state = 'pending'
    RETURNING e.job_id, e.state, e.depends_on_id
)
SELECT job_id, count(*) FILTER (WHERE state = 'resolved') AS resolved,
       min(depends_on_id) FILTER (WHERE state = 'failed') AS failed_by
FROM marked
GROUP BY job_id
ORDER BY job_id;

-- name: reopen_edges
-- The dead jobs in %(job_ids)s were requeued: their failed edges are pending again.
-- Returns the dependents those edges held, in id order.
WITH reopened AS (
    UPDATE dbqueue_dependency e SET state = 'pending'
    WHERE e.depends_on_id = ANY (ARRAY(
        SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)
    ))
      AND e.state = 'failed'
    RETURNING e.job_id
)
SELECT DISTINCT job_id FROM reopened ORDER BY job_id;

-- name: lock_dependents
-- Lock the jobs in %(job_ids)s in id order (two settling transactions then cannot
-- deadlock on them); return what settling them needs: state, pending count, error
-- history and last error code, how many of their edges stand failed, dedupe key, and the
-- database clock (UTC wall-clock time) to stamp a history entry with.
SELECT j.id, j.state, j.pending_dependencies, j.errors, j.last_error_code, j.task,
       j.dedupe_key,
       (SELECT count(*) FROM dbqueue_dependency e
        WHERE e.job_id = j.id AND e.state = 'failed') AS failed_edges,
       clock_timestamp() AT TIME ZONE 'UTC' AS clock
FROM dbqueue_job j
WHERE j.id = ANY (ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(%(job_ids)s::jsonb)))
ORDER BY j.id
FOR UPDATE;

-- name: update_dependents
-- Write what settling decided for each locked dependent in %(rows)s (JSON [{id, resolved,
-- state, code, last_error, errors}]: pending count lowered by resolved; the state; the
-- error fields, unchanged where null). finished_at follows the state: cleared when it is
-- waiting or ready, stamped when it becomes terminal. Listeners on %(channel)s hear of the
-- queues of the jobs made ready, at commit. Returns each job's id, state and queue. The
-- rows are reached from the ids (= ANY) by primary key, not by a join planned on a guess.
WITH settled AS (
    UPDATE dbqueue_job j
    SET pending_dependencies = j.pending_dependencies - r.resolved,
        state = r.state,
        finished_at = CASE WHEN r.state IN ('waiting', 'ready') THEN NULL
                           WHEN r.state = j.state THEN j.finished_at
                           ELSE clock_timestamp() END,
        last_error_code = COALESCE(r.code, j.last_error_code),
        last_error = COALESCE(r.last_error, j.last_error),
        errors = COALESCE(r.errors, j.errors)
    FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(
        id bigint, resolved integer, state text, code text, last_error text, errors jsonb
    )
    WHERE j.id = ANY (ARRAY(
        SELECT (value ->> 'id')::bigint FROM jsonb_array_elements(%(rows)s::jsonb)
    ))
      AND j.id = r.id
    RETURNING j.id, j.state, j.queue
)
SELECT id, state, queue,
       CASE WHEN state = 'ready' THEN pg_notify(%(channel)s, queue) END AS notified
FROM settled;

-- name: workflow_jobs
-- The ids of every job linked to job %(job_id)s through dependencies, either way (its
-- workflow), itself included, at most %(limit)s of them, lowest first.
WITH RECURSIVE linked(id) AS (
    SELECT %(job_id)s::bigint
    UNION
    SELECT CASE WHEN e.job_id = l.id THEN e.depends_on_id ELSE e.job_id END
    FROM linked l JOIN dbqueue_dependency e ON e.job_id = l.id OR e.depends_on_id = l.id
)
SELECT id FROM linked ORDER BY id LIMIT %(limit)s;
