-- Named statements of the lease protocol for MySQL 8.0.17+ and MariaDB 10.6+.
-- Neither has UPDATE ... RETURNING (MySQL has no RETURNING at all), so a block may hold
-- several statements, run in order in one transaction: lock the rows, change them, then
-- read back what changed (%(previous)s: the rows of the latest statement that returned
-- rows; a statement marked /* if previous */ is skipped when those were none). Deadlines
-- use UTC_TIMESTAMP(6) in a statement that runs after the row lock is held. Structured parameters arrive as JSON text. No NOTIFY: workers
-- poll, and wake at once for jobs committed in their own process. Statements that change
-- rows by id drive the join from the ids (STRAIGHT_JOIN ... FORCE INDEX (PRIMARY)): a
-- multi-table UPDATE locks every row it reads, so it must read only those rows.

-- name: insert_jobs
-- Insert one job per element of %(rows)s (a JSON array of {"args", "kwargs"}), all with
-- the same options, ids increasing in input order: %(state)s ready, or waiting for
-- %(pending_dependencies)s jobs (whose edges insert_dependencies writes next). A row whose
-- (task, dedupe_key) matches an unfinished job (waiting, ready or running) hits the unique
-- index on the generated active_dedupe_key column and is skipped, never an error. The
-- rows inserted are read back by primary key: the first %(count)s rows from
-- LAST_INSERT_ID() (the first id this insert generated on this connection) with the
-- batch's creation time and task. So the read costs a few rows at any
-- table size, and another connection's job is never read back, even one stamped in the
-- same microsecond: its id comes before ours, or after all of ours. That holds because an
-- insert's ids are consecutive under innodb_autoinc_lock_mode 0 and 1. Under 2, MySQL 8's
-- default, another insert may take ids among a batch's, and such a job could be read back
-- in place of one of the batch's own; one row's id is exact under every mode. Before the
-- insert, LAST_INSERT_ID() is set past every id, so a skipped duplicate, which generates
-- no id, reads back nothing. (%(channel)s and %(notify)s are unused: no NOTIFY.)
SET @dbqueue_inserted_at = UTC_TIMESTAMP(6),
    @dbqueue_no_id = LAST_INSERT_ID(18446744073709551615);
INSERT INTO dbqueue_job (
    queue, task, args, kwargs, state, priority, run_at, attempts, max_attempts,
    lease_token, lease_seconds, created_at, dedupe_key, serial_key, subject_type_id,
    subject_id, backend, last_worker_id, last_error_code, last_error, errors, meta,
    pending_dependencies, limit_key, limit_size, limit_rate
)
SELECT
    %(queue)s, %(task)s, item.args, item.kwargs, %(state)s, %(priority)s,
    COALESCE(%(run_at)s, @dbqueue_inserted_at + INTERVAL %(delay)s * 1000000 MICROSECOND),
    0, %(max_attempts)s, 0, %(lease_seconds)s, @dbqueue_inserted_at, %(dedupe_key)s,
    %(serial_key)s, %(subject_type_id)s, %(subject_id)s, %(backend)s, '', '', '', '[]', %(meta)s,
    %(pending_dependencies)s, %(limit_key)s, %(limit_size)s, %(limit_rate)s
FROM JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    position FOR ORDINALITY, args JSON PATH '$.args', kwargs JSON PATH '$.kwargs'
)) AS item
ORDER BY item.position
ON DUPLICATE KEY UPDATE id = id;
SELECT id, created_at, run_at FROM dbqueue_job
WHERE id >= LAST_INSERT_ID() AND created_at = @dbqueue_inserted_at AND task = %(task)s
ORDER BY id
LIMIT %(count)s;

-- name: claim
-- Lease up to %(limit)s due ready jobs of the queues in %(queues)s (NULL: every queue),
-- highest priority first across them (MySQL has no LATERAL: there is no per-queue turn;
-- %(turn)s is unused). Rows locked by other transactions are skipped, never awaited. A job
-- with a serial key waits while an earlier job with that key is ready or running, or any
-- job with that key runs (a requeued one included). Each claimed row gets attempts + 1,
-- lease_token + 1, the worker id and a lease.
-- Keyed jobs are never walked past one by one: only the first job of each serial key is a
-- candidate. The first statement reads the keyed part of the ready index in claim order,
-- %(serial_window)s rows at most, marking each row that is its key's first ready job (the
-- lowest id: one index dive) with no job of its key running (one index probe): its key's
-- first active job. The second keeps those, in claim order, up to %(limit)s; only when the
-- window was full and held fewer than %(limit)s of them (a deep key ahead, say) are the
-- keys with a ready job walked, one index probe each (a loose index scan for GROUP BY),
-- each giving its first ready job. That condition reads only the statement's parameters,
-- so MariaDB settles it before reading a row and otherwise never runs the walk (with
-- 100,000 keys the statement takes 0.6 ms). Neither statement locks a row. The third
-- locks, skipping rows locked elsewhere, up to %(limit)s keyless jobs from the keyless part
-- of the ready index (no serial key, no limit: the generated columns serial_keyed and
-- limited lead it after the state, so neither keyed nor limited jobs are walked past) and
-- the keyed candidates still ready and still first of their key (checked again once
-- locked), and keeps the first %(limit)s of both in claim order, which the fourth sets
-- aside (@dbqueue_chosen, with the clock for started_at, @dbqueue_claimed_at) while the
-- limited jobs are found; the others stay locked until the claim commits, a few
-- milliseconds.
-- A job under a limit (limit_key, limits.py) runs only while fewer than its limit_size
-- jobs of that limit run, and starts only while its limit_rate has a start left, counted
-- across every worker, exactly. The fifth statement probes for a ready limited job (the
-- first entry of dbqueue_job_limited_my's ready part, empty unless limits are in use). The
-- statements marked /* if previous */ run only when the latest statement that returned
-- rows returned some (sql/__init__.py): with no limited job ready none of them runs, so
-- the claim costs one index probe, one round trip, more than it did before limits (on
-- MariaDB 10.11, within 0.2 ms of it, where running the limit statements every time
-- added 1.8 ms), and once one of them finds nothing, the others are skipped too.
-- MySQL has no advisory lock that ends with the transaction, so a row of dbqueue_limit
-- (migration 0018) stands for each limit. The sixth statement walks the limits with a ready job (a loose
-- index scan of dbqueue_job_limited_my, one probe per limit), takes each one's first due
-- job of a served, unpaused queue in claim order (its head) and keeps, of the limits with
-- a free slot (fewer running jobs than the head's limit_size, or no size) and a start left
-- (no pace of dbqueue_rate_bucket further ahead of the clock than the burst allows, or no
-- rate), the %(limit)s with the first heads: only a hint, read without a lock. The seventh
-- writes the dbqueue_limit rows missing (a limit's first claim; a claimer racing to write
-- the same row waits for the other's claim to commit, once per limit ever). The eighth
-- locks those limits' rows FOR UPDATE SKIP LOCKED: a limit another claim holds is left to
-- a later claim, never awaited, so claimers never queue behind each other. Only then does
-- the ninth count each held limit's running jobs and read its pace; it is a statement of
-- its own because the worker's connection runs at READ COMMITTED (Django's default for
-- MySQL, docs/howto/databases.md), where each statement reads the latest committed rows
-- (at REPEATABLE READ it would read the snapshot of the claim's first statement, taken
-- before the lock, and could count too few, so the limit would not hold there): every
-- claim that took jobs of the limit, or moved its pace, held its row until it committed,
-- and InnoDB makes a commit visible before it releases the transaction's locks, so the
-- count includes every job those claims leased and the pace every start they made, and no
-- other claim can lease one of the limit's jobs until this one commits. The limit's room
-- is then the least of %(limit)s, its head's limit_size less that count (no size: no cap)
-- and, for a rate, the starts its GCRA admits by the statement's clock, read after the
-- lock (limits.py): with burst = max(1, floor(rate / 10)) and due the later of the pace's
-- due_at and the clock (no pace: the clock), max(0, floor(burst - 1 - (due - clock) *
-- rate + 1e-9) + 1). The same statement walks the limit's due ready jobs in claim order,
-- one index probe each, taking at most the room. The tenth locks them (still ready:
-- checked again once locked) together with the jobs set aside, and keeps the first
-- %(limit)s of all in claim order: a limit's jobs are a prefix of its claim order, never
-- more than its room, so no two claims ever take the same last slot or start. The
-- eleventh sets them aside in place of the first ones, with the clock read again, after
-- the limits' locks, for started_at: a job starts after the finish its slot waited for,
-- and no earlier than its start was admitted. A slot frees when a job leaves running by
-- any path: nothing is written, since the count reads the running rows themselves. A
-- start is spent for good: after the update, still under the limits' locks, the
-- thirteenth and fourteenth move each paced limit's due_at on by the k jobs of it that
-- started, to the later of due_at and started_at plus k / rate (a missing pace row is
-- inserted, at started_at plus k / rate; to the microsecond, rounded as PostgreSQL rounds
-- it), rate being the highest limit_rate of those jobs (as PostgreSQL takes it). They
-- update the rows that exist, then insert the missing ones (found by a consistent read at
-- READ COMMITTED), so no claim takes a gap lock on dbqueue_rate_bucket and claims pacing
-- different limits never wait for each other.
-- A paused queue (dbqueue_queue_pause, pauses.py) is never served: the statements that
-- choose jobs leave out every queue whose pause is in force (until NULL or ahead of the
-- clock), so its jobs are passed over in the index as those of a queue not named are, never
-- chosen. The update checks the pause again, against started_at (@dbqueue_claimed_at, read
-- before it), and InnoDB reads the other tables of a multi-table UPDATE with shared locks:
-- it sees every pause committed before it began and waits for one being written (then
-- leaves the job out), so a claim that did not see the pause's commit stamped its jobs
-- before that commit. A row the update leaves out (paused meanwhile) is still ready, and
-- still locked by this claim until it commits, so the last statement returns exactly the
-- rows leased: those running.
SELECT w.id,
       w.id = (
           SELECT e.id FROM dbqueue_job AS e FORCE INDEX (dbqueue_job_serial_active_my)
           WHERE e.serial_key = w.serial_key AND e.state = 'ready'
           ORDER BY e.id
           LIMIT 1
       ) AND (
           SELECT r.id FROM dbqueue_job AS r FORCE INDEX (dbqueue_job_serial_active_my)
           WHERE r.serial_key = w.serial_key AND r.state = 'running'
           LIMIT 1
       ) IS NULL AS head
FROM (
    SELECT s.id, s.serial_key FROM dbqueue_job AS s FORCE INDEX (dbqueue_job_ready_keyed_my)
    WHERE s.state = 'ready' AND s.serial_keyed = 1 AND s.limited = 0
      AND s.run_at <= UTC_TIMESTAMP(6)
      AND (%(queues)s IS NULL OR s.queue IN (
          SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (
              name VARCHAR(100) PATH '$'
          )) AS q
      ))
      AND NOT EXISTS (
          SELECT 1 FROM dbqueue_queue_pause AS p
          WHERE p.queue = s.queue AND (p.until IS NULL OR p.until > UTC_TIMESTAMP(6))
      )
    ORDER BY s.priority DESC, s.run_at, s.id
    LIMIT %(serial_window)s
) AS w;
SELECT h.id FROM (
    SELECT seen.id FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (
        id BIGINT PATH '$[0]', head INT PATH '$[1]'
    )) AS seen
    WHERE seen.head = 1
    UNION
    SELECT walked.id FROM (
        SELECT serial_key, MIN(id) AS id FROM dbqueue_job FORCE INDEX (dbqueue_job_serial_active_my)
        WHERE state = 'ready' AND serial_key IS NOT NULL
        GROUP BY serial_key
    ) AS walked
    WHERE JSON_LENGTH(%(previous)s) = %(serial_window)s
      AND (SELECT COUNT(*) FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (
              head INT PATH '$[1]'
          )) AS found WHERE found.head = 1) < %(limit)s
) AS first_of_key
STRAIGHT_JOIN dbqueue_job AS h FORCE INDEX (PRIMARY) ON h.id = first_of_key.id
WHERE h.state = 'ready' AND h.run_at <= UTC_TIMESTAMP(6)
  AND (%(queues)s IS NULL OR h.queue IN (
      SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (name VARCHAR(100) PATH '$')) AS q
  ))
  AND NOT EXISTS (
      SELECT 1 FROM dbqueue_queue_pause AS p
      WHERE p.queue = h.queue AND (p.until IS NULL OR p.until > UTC_TIMESTAMP(6))
  )
  AND (
      SELECT r.id FROM dbqueue_job AS r FORCE INDEX (dbqueue_job_serial_active_my)
      WHERE r.serial_key = h.serial_key AND r.state = 'running'
      LIMIT 1
  ) IS NULL
ORDER BY h.priority DESC, h.run_at, h.id
LIMIT %(limit)s;
(SELECT k.id, k.priority, k.run_at FROM dbqueue_job AS k FORCE INDEX (dbqueue_job_ready_keyed_my)
 WHERE k.state = 'ready' AND k.serial_keyed = 0 AND k.limited = 0
   AND k.run_at <= UTC_TIMESTAMP(6)
   AND (%(queues)s IS NULL OR k.queue IN (
       SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (name VARCHAR(100) PATH '$')) AS q
   ))
   AND NOT EXISTS (
       SELECT 1 FROM dbqueue_queue_pause AS p
       WHERE p.queue = k.queue AND (p.until IS NULL OR p.until > UTC_TIMESTAMP(6))
   )
 ORDER BY k.priority DESC, k.run_at, k.id
 LIMIT %(limit)s
 FOR UPDATE SKIP LOCKED)
UNION ALL
(SELECT c.id, c.priority, c.run_at
 FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS first_of_key
 STRAIGHT_JOIN dbqueue_job AS c FORCE INDEX (PRIMARY) ON c.id = first_of_key.id
 WHERE c.state = 'ready' AND c.run_at <= UTC_TIMESTAMP(6)
   AND NOT EXISTS (
       SELECT 1 FROM dbqueue_queue_pause AS p
       WHERE p.queue = c.queue AND (p.until IS NULL OR p.until > UTC_TIMESTAMP(6))
   )
   AND c.id = (
       SELECT e.id FROM dbqueue_job AS e FORCE INDEX (dbqueue_job_serial_active_my)
       WHERE e.serial_key = c.serial_key AND e.state = 'ready'
       ORDER BY e.id
       LIMIT 1
   ) AND (
       SELECT r.id FROM dbqueue_job AS r FORCE INDEX (dbqueue_job_serial_active_my)
       WHERE r.serial_key = c.serial_key AND r.state = 'running'
       LIMIT 1
   ) IS NULL
 ORDER BY c.priority DESC, c.run_at, c.id
 LIMIT %(limit)s
 FOR UPDATE SKIP LOCKED)
ORDER BY priority DESC, run_at, id
LIMIT %(limit)s;
SET @dbqueue_chosen = %(previous)s, @dbqueue_claimed_at = UTC_TIMESTAMP(6);
SELECT 1 AS limited FROM dbqueue_job FORCE INDEX (dbqueue_job_limited_my)
WHERE state = 'ready' AND limit_key IS NOT NULL
LIMIT 1;
/* if previous */
SELECT h.limit_key, h.id AS head_id FROM (
    SELECT (
        SELECT x.id FROM dbqueue_job AS x FORCE INDEX (dbqueue_job_limited_my)
        WHERE x.state = 'ready' AND x.limit_key = g.limit_key AND x.run_at <= UTC_TIMESTAMP(6)
          AND (%(queues)s IS NULL OR x.queue IN (
              SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (
                  name VARCHAR(100) PATH '$'
              )) AS q
          ))
          AND NOT EXISTS (
              SELECT 1 FROM dbqueue_queue_pause AS p
              WHERE p.queue = x.queue AND (p.until IS NULL OR p.until > UTC_TIMESTAMP(6))
          )
        ORDER BY x.negated_priority, x.run_at, x.id
        LIMIT 1
    ) AS id
    FROM (
        SELECT limit_key FROM dbqueue_job FORCE INDEX (dbqueue_job_limited_my)
        WHERE state = 'ready' AND limit_key IS NOT NULL
        GROUP BY state, limit_key
    ) AS g
) AS head
STRAIGHT_JOIN dbqueue_job AS h FORCE INDEX (PRIMARY) ON h.id = head.id
WHERE (h.limit_size IS NULL OR h.limit_size > (
    SELECT COUNT(*) FROM dbqueue_job AS r FORCE INDEX (dbqueue_job_limited_my)
    WHERE r.state = 'running' AND r.limit_key = h.limit_key
))
  AND (h.limit_rate IS NULL OR NOT EXISTS (
      SELECT 1 FROM dbqueue_rate_bucket AS b
      WHERE b.limit_key = h.limit_key
        AND b.due_at > UTC_TIMESTAMP(6) + INTERVAL CEILING(
            (GREATEST(1, FLOOR(h.limit_rate / 10)) - 1) / h.limit_rate * 1000000
        ) MICROSECOND
  ))
ORDER BY h.priority DESC, h.run_at, h.id
LIMIT %(limit)s;
/* if previous */
INSERT IGNORE INTO dbqueue_limit (limit_key)
SELECT wanted.limit_key
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (limit_key VARCHAR(300) PATH '$[0]')) AS wanted
WHERE NOT EXISTS (SELECT 1 FROM dbqueue_limit AS l WHERE l.limit_key = wanted.limit_key)
ORDER BY CAST(wanted.limit_key AS BINARY);
/* if previous */
SELECT l.limit_key, wanted.head_id
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (
    limit_key VARCHAR(300) PATH '$[0]', head_id BIGINT PATH '$[1]'
)) AS wanted
STRAIGHT_JOIN dbqueue_limit AS l FORCE INDEX (PRIMARY) ON l.limit_key = wanted.limit_key
FOR UPDATE SKIP LOCKED;
/* if previous */
WITH RECURSIVE held AS (
    SELECT held_limit.limit_key, LEAST(
        %(limit)s,
        CASE WHEN head.limit_size IS NULL THEN %(limit)s
             ELSE head.limit_size - (
                 SELECT COUNT(*) FROM dbqueue_job AS r FORCE INDEX (dbqueue_job_limited_my)
                 WHERE r.state = 'running' AND r.limit_key = held_limit.limit_key
             ) END,
        CASE WHEN head.limit_rate IS NULL THEN %(limit)s
             ELSE GREATEST(0, FLOOR(
                 GREATEST(1, FLOOR(head.limit_rate / 10)) - 1
                 - TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), GREATEST(COALESCE((
                       SELECT b.due_at FROM dbqueue_rate_bucket AS b FORCE INDEX (PRIMARY)
                       WHERE b.limit_key = held_limit.limit_key
                   ), UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6))) * head.limit_rate / 1e6
                 + 1e-9
             ) + 1) END
    ) AS room
    FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (
        limit_key VARCHAR(300) PATH '$[0]', head_id BIGINT PATH '$[1]'
    )) AS held_limit
    STRAIGHT_JOIN dbqueue_job AS head FORCE INDEX (PRIMARY) ON head.id = held_limit.head_id
),
taken (limit_key, room, n, id, negated_priority, run_at) AS (
    SELECT held.limit_key, held.room, 1, j.id, j.negated_priority, j.run_at
    FROM held
    STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = (
        SELECT x.id FROM dbqueue_job AS x FORCE INDEX (dbqueue_job_limited_my)
        WHERE x.state = 'ready' AND x.limit_key = held.limit_key
          AND x.run_at <= UTC_TIMESTAMP(6)
          AND (%(queues)s IS NULL OR x.queue IN (
              SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (
                  name VARCHAR(100) PATH '$'
              )) AS q
          ))
          AND NOT EXISTS (
              SELECT 1 FROM dbqueue_queue_pause AS p
              WHERE p.queue = x.queue AND (p.until IS NULL OR p.until > UTC_TIMESTAMP(6))
          )
        ORDER BY x.negated_priority, x.run_at, x.id
        LIMIT 1
    )
    WHERE held.room > 0
    UNION ALL
    SELECT t.limit_key, t.room, t.n + 1, j.id, j.negated_priority, j.run_at
    FROM taken AS t
    STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = (
        SELECT x.id FROM dbqueue_job AS x FORCE INDEX (dbqueue_job_limited_my)
        WHERE x.state = 'ready' AND x.limit_key = t.limit_key
          AND x.negated_priority >= t.negated_priority
          AND (x.negated_priority > t.negated_priority OR x.run_at > t.run_at
               OR (x.run_at = t.run_at AND x.id > t.id))
          AND x.run_at <= UTC_TIMESTAMP(6)
          AND (%(queues)s IS NULL OR x.queue IN (
              SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (
                  name VARCHAR(100) PATH '$'
              )) AS q
          ))
          AND NOT EXISTS (
              SELECT 1 FROM dbqueue_queue_pause AS p
              WHERE p.queue = x.queue AND (p.until IS NULL OR p.until > UTC_TIMESTAMP(6))
          )
        ORDER BY x.negated_priority, x.run_at, x.id
        LIMIT 1
    )
    WHERE t.n < t.room
)
SELECT id FROM taken;
/* if previous */
SELECT c.id, c.priority, c.run_at
FROM (
    SELECT kept.id FROM JSON_TABLE(@dbqueue_chosen, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS kept
    UNION ALL
    SELECT taken.id FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS taken
) AS candidate
STRAIGHT_JOIN dbqueue_job AS c FORCE INDEX (PRIMARY) ON c.id = candidate.id
WHERE c.state = 'ready'
ORDER BY c.priority DESC, c.run_at, c.id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;
/* if previous */
SET @dbqueue_chosen = %(previous)s, @dbqueue_claimed_at = UTC_TIMESTAMP(6);
UPDATE JSON_TABLE(@dbqueue_chosen, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
SET j.state = 'running', j.attempts = j.attempts + 1, j.lease_token = j.lease_token + 1,
    j.worker_id = %(worker_id)s, j.last_worker_id = %(worker_id)s,
    j.lease_until = @dbqueue_claimed_at + INTERVAL j.lease_seconds SECOND,
    j.started_at = @dbqueue_claimed_at
WHERE NOT EXISTS (
    SELECT 1 FROM dbqueue_queue_pause AS p
    WHERE p.queue = j.queue AND (p.until IS NULL OR p.until > @dbqueue_claimed_at)
);
/* if previous */
UPDATE (
    SELECT j.limit_key, ROUND(COUNT(*) / MAX(j.limit_rate) * 1000000) AS advance,
           MAX(j.limit_rate) AS rate
    FROM JSON_TABLE(@dbqueue_chosen, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
    STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
    WHERE j.state = 'running' AND j.limit_rate IS NOT NULL
    GROUP BY j.limit_key
) AS started
STRAIGHT_JOIN dbqueue_rate_bucket AS b FORCE INDEX (PRIMARY) ON b.limit_key = started.limit_key
SET b.due_at = GREATEST(b.due_at, @dbqueue_claimed_at) + INTERVAL started.advance MICROSECOND,
    b.rate = started.rate;
/* if previous */
INSERT INTO dbqueue_rate_bucket (limit_key, due_at, rate)
SELECT started.limit_key, @dbqueue_claimed_at + INTERVAL started.advance MICROSECOND, started.rate
FROM (
    SELECT j.limit_key, ROUND(COUNT(*) / MAX(j.limit_rate) * 1000000) AS advance,
           MAX(j.limit_rate) AS rate
    FROM JSON_TABLE(@dbqueue_chosen, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
    STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
    WHERE j.state = 'running' AND j.limit_rate IS NOT NULL
    GROUP BY j.limit_key
) AS started
WHERE NOT EXISTS (
    SELECT 1 FROM dbqueue_rate_bucket AS b WHERE b.limit_key = started.limit_key
)
ORDER BY CAST(started.limit_key AS BINARY);
SELECT j.id, j.lease_token, j.task, j.args, j.kwargs, j.attempts, j.max_attempts,
       j.lease_until, j.lease_seconds, j.queue, j.priority, j.run_at, j.backend, j.meta
FROM JSON_TABLE(@dbqueue_chosen, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
WHERE j.state = 'running';

-- name: claim_jobs
-- Lease the jobs of %(job_ids)s (a JSON array of ids) that are ready, due or not: eager mode
-- runs the jobs a commit enqueued, and their retries at once. Rows locked by other
-- transactions are skipped, never awaited; priority and serial keys are not consulted (the
-- caller names the jobs). Each claimed row gets what a claim gives it.
SELECT j.id FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
WHERE j.state = 'ready'
FOR UPDATE SKIP LOCKED;
SET @dbqueue_claimed_at = UTC_TIMESTAMP(6);
UPDATE JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
SET j.state = 'running', j.attempts = j.attempts + 1, j.lease_token = j.lease_token + 1,
    j.worker_id = %(worker_id)s, j.last_worker_id = %(worker_id)s,
    j.lease_until = @dbqueue_claimed_at + INTERVAL j.lease_seconds SECOND,
    j.started_at = @dbqueue_claimed_at;
SELECT j.id, j.lease_token, j.task, j.args, j.kwargs, j.attempts, j.max_attempts,
       j.lease_until, j.lease_seconds, j.queue, j.priority, j.run_at, j.backend, j.meta
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id;

-- name: next_due
-- Seconds from the database clock until the next ready job of %(queues)s (NULL: every
-- queue) that is not due yet becomes due, or NULL when there is none (jobs already due are
-- left out: a claim just passed them by). A pause of a served queue that ends by itself
-- (until) is due then too: its jobs are claimable from that moment. So is the next start
-- of a rate-limited limit with due jobs in a served queue (dbqueue_rate_bucket: its due_at
-- less (burst - 1) / rate seconds, that moment rounded up to the microsecond, when the
-- claim admits one again); the table holds a row per limit paced in the last hour (the
-- reaper's sweep), each checked by a probe of the limited index.
SET @dbqueue_now = UTC_TIMESTAMP(6);
SELECT TIMESTAMPDIFF(MICROSECOND, @dbqueue_now, MIN(due.at)) / 1000000.0 AS seconds
FROM (
    SELECT MIN(run_at) AS at FROM dbqueue_job
    WHERE state = 'ready' AND run_at > @dbqueue_now
      AND (%(queues)s IS NULL OR queue IN (
          SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (name VARCHAR(100) PATH '$')) AS q
      ))
    UNION ALL
    SELECT MIN(p.until) FROM dbqueue_queue_pause AS p
    WHERE p.until > @dbqueue_now
      AND (%(queues)s IS NULL OR p.queue IN (
          SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (name VARCHAR(100) PATH '$')) AS q
      ))
    UNION ALL
    SELECT MIN(paced.at) FROM (
        SELECT b.limit_key, b.due_at - INTERVAL FLOOR(
                   (GREATEST(1, FLOOR(b.rate / 10)) - 1) / b.rate * 1000000
               ) MICROSECOND AS at
        FROM dbqueue_rate_bucket AS b
    ) AS paced
    WHERE paced.at > @dbqueue_now
      AND EXISTS (
          SELECT 1 FROM dbqueue_job AS j FORCE INDEX (dbqueue_job_limited_my)
          WHERE j.state = 'ready' AND j.limit_key = paced.limit_key AND j.run_at <= @dbqueue_now
            AND (%(queues)s IS NULL OR j.queue IN (
                SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (
                    name VARCHAR(100) PATH '$'
                )) AS q
            ))
      )
) AS due;

-- name: pause_queues
-- Pause the queues of %(queues)s (a JSON array of names): from this transaction's commit
-- on, no claim takes their jobs. paused_at is the database clock's; until is %(seconds)s
-- on, to the microsecond (NULL: until resumed). A queue paused already takes the new
-- values. The rows written are read back by primary key; this transaction holds them.
SET @dbqueue_paused_at = UTC_TIMESTAMP(6),
    @dbqueue_paused_until = UTC_TIMESTAMP(6) + INTERVAL ROUND(%(seconds)s * 1000000) MICROSECOND;
INSERT INTO dbqueue_queue_pause (queue, paused_at, `until`, paused_by)
SELECT q.name, @dbqueue_paused_at, @dbqueue_paused_until, %(actor)s
FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (name VARCHAR(100) PATH '$')) AS q
ON DUPLICATE KEY UPDATE
    paused_at = @dbqueue_paused_at, `until` = @dbqueue_paused_until, paused_by = %(actor)s;
SELECT p.queue, p.paused_at, p.until, p.paused_by
FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (name VARCHAR(100) PATH '$')) AS q
STRAIGHT_JOIN dbqueue_queue_pause AS p FORCE INDEX (PRIMARY) ON p.queue = q.name;

-- name: resume_queues
-- Resume the paused queues of %(queues)s (NULL: every paused queue), returning their names:
-- the first statement locks their pauses, the second deletes those (the block's result is
-- the first one's rows, the delete returning none). (%(channel)s is unused: no NOTIFY;
-- idle workers claim at their next poll.)
SELECT p.queue FROM dbqueue_queue_pause AS p
WHERE %(queues)s IS NULL OR p.queue IN (
    SELECT q.name FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (name VARCHAR(100) PATH '$')) AS q
)
ORDER BY p.queue
FOR UPDATE;
DELETE p FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (queue VARCHAR(100) PATH '$[0]')) AS resumed
STRAIGHT_JOIN dbqueue_queue_pause AS p FORCE INDEX (PRIMARY) ON p.queue = resumed.queue;

-- name: renew
-- Extend each lease in %(leases)s (JSON [{job_id, lease_token, worker_id}]) by its job's
-- lease_seconds. Applies only to rows still running under that (worker_id, lease_token)
-- with lease_until ahead of the clock, read after the rows are locked. A row another
-- transaction holds locked is skipped, never awaited (the update reads only the rows
-- locked). Returns the ids still owned, each with the time an operator asked it to stop
-- (NULL: not asked), and the ids skipped (skipped 1): renew those later.
SELECT j.id FROM JSON_TABLE(%(leases)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id'
)) AS l
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = l.job_id
ORDER BY j.id
FOR UPDATE SKIP LOCKED;
UPDATE JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
STRAIGHT_JOIN JSON_TABLE(%(leases)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id'
)) AS l ON l.job_id = chosen.id
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
SET j.lease_until = UTC_TIMESTAMP(6) + INTERVAL j.lease_seconds SECOND
WHERE j.state = 'running' AND j.worker_id = l.worker_id AND j.lease_token = l.lease_token
  AND j.lease_until > UTC_TIMESTAMP(6);
SELECT j.id, j.cancel_requested_at, 0 AS skipped
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
STRAIGHT_JOIN JSON_TABLE(%(leases)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id'
)) AS l ON l.job_id = chosen.id
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
WHERE j.state = 'running' AND j.worker_id = l.worker_id AND j.lease_token = l.lease_token
  AND j.lease_until > UTC_TIMESTAMP(6)
UNION ALL
SELECT l.job_id, NULL, 1 FROM JSON_TABLE(%(leases)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id'
)) AS l
WHERE l.job_id NOT IN (SELECT chosen.id FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen)
  AND EXISTS (SELECT 1 FROM dbqueue_job AS e WHERE e.id = l.job_id);

-- name: set_progress
-- Store each report in %(reports)s (JSON [{job_id, lease_token, worker_id, progress}],
-- progress as JSON text) as its job's progress, with "at" set to the database clock (ISO
-- 8601, UTC). Applies only to rows still running under that (worker_id, lease_token) with
-- lease_until ahead of the clock, read after the rows are locked. A row another
-- transaction holds locked is skipped, never awaited (the update reads only the rows
-- locked). Returns the ids written (marked by this block's "at"), and the ids skipped
-- (skipped 1): write their newest report later.
SELECT j.id FROM JSON_TABLE(%(reports)s, '$[*]' COLUMNS (job_id BIGINT PATH '$.job_id')) AS r
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = r.job_id
ORDER BY j.id
FOR UPDATE SKIP LOCKED;
SET @dbqueue_progress_at = DATE_FORMAT(UTC_TIMESTAMP(6), '%%Y-%%m-%%dT%%H:%%i:%%s.%%fZ');
UPDATE JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
STRAIGHT_JOIN JSON_TABLE(%(reports)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id', progress LONGTEXT PATH '$.progress'
)) AS r ON r.job_id = chosen.id
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
SET j.progress = JSON_SET(r.progress, '$.at', @dbqueue_progress_at)
WHERE j.state = 'running' AND j.worker_id = r.worker_id AND j.lease_token = r.lease_token
  AND j.lease_until > UTC_TIMESTAMP(6);
SELECT j.id, 0 AS skipped
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen
STRAIGHT_JOIN JSON_TABLE(%(reports)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id'
)) AS r ON r.job_id = chosen.id
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
WHERE j.state = 'running' AND j.worker_id = r.worker_id AND j.lease_token = r.lease_token
  AND JSON_VALUE(j.progress, '$.at') = @dbqueue_progress_at
UNION ALL
SELECT r.job_id, 1 FROM JSON_TABLE(%(reports)s, '$[*]' COLUMNS (job_id BIGINT PATH '$.job_id')) AS r
WHERE r.job_id NOT IN (SELECT chosen.id FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen)
  AND EXISTS (SELECT 1 FROM dbqueue_job AS e WHERE e.id = r.job_id);

-- name: complete
-- Mark each leased job in %(rows)s (JSON [{job_id, lease_token, worker_id, result}], result
-- as JSON text or null) succeeded with its result. Each row applies only while its lease
-- is the caller's and live by the clock read after the row locks are held. A row another
-- transaction holds locked is skipped, never awaited. Unless %(settles)s (the caller then
-- settles the dependents in the same transaction), a job that other jobs wait for is left
-- running and returned deferred: complete it again with %(settles)s. Whether one waits is
-- read by the second statement, a plain read once the row locks are held (it locks no
-- edge), so an enqueue that added an edge has committed by then. Returns the ids completed
-- (marked by this block's finished_at), skipped (skipped 1: write those later) and
-- deferred (deferred 1); the others' leases were lost.
SELECT j.id FROM JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id', result LONGTEXT PATH '$.result'
)) AS d
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = d.job_id
ORDER BY j.id
FOR UPDATE SKIP LOCKED;
SELECT chosen.id, (NOT %(settles)s) AND EXISTS (
           SELECT 1 FROM dbqueue_dependency AS e FORCE INDEX (dbqueue_dependency_on)
           WHERE e.depends_on_id = chosen.id AND e.state = 'pending'
       ) AS deferred
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen;
SET @dbqueue_completed_at = UTC_TIMESTAMP(6);
UPDATE JSON_TABLE(%(previous)s, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', deferred INT PATH '$[1]'
)) AS chosen
STRAIGHT_JOIN JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id', result LONGTEXT PATH '$.result'
)) AS d ON d.job_id = chosen.id
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
SET j.state = 'succeeded', j.result = d.result, j.worker_id = NULL, j.lease_until = NULL,
    j.finished_at = @dbqueue_completed_at
WHERE chosen.deferred = 0
  AND j.state = 'running' AND j.worker_id = d.worker_id AND j.lease_token = d.lease_token
  AND j.lease_until > @dbqueue_completed_at;
SELECT j.id, 0 AS skipped, 0 AS deferred
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', deferred INT PATH '$[1]'
)) AS chosen
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = chosen.id
WHERE chosen.deferred = 0 AND j.state = 'succeeded' AND j.finished_at = @dbqueue_completed_at
UNION ALL
SELECT chosen.id, 0, 1 FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', deferred INT PATH '$[1]'
)) AS chosen
WHERE chosen.deferred = 1
UNION ALL
SELECT d.job_id, 1, 0 FROM JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id', result LONGTEXT PATH '$.result'
)) AS d
WHERE d.job_id NOT IN (SELECT chosen.id FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS chosen)
  AND EXISTS (SELECT 1 FROM dbqueue_job AS e WHERE e.id = d.job_id);

-- name: release
-- Hand the leased job back unrun: ready and due now, the attempt refunded, the lease token
-- kept (it never decreases). Applies only while the lease is the caller's and live.
SELECT id FROM dbqueue_job WHERE id = %(job_id)s FOR UPDATE;
UPDATE dbqueue_job
SET state = 'ready', attempts = attempts - 1, worker_id = NULL, lease_until = NULL,
    run_at = UTC_TIMESTAMP(6)
WHERE id = %(job_id)s
  AND state = 'running' AND worker_id = %(worker_id)s AND lease_token = %(lease_token)s
  AND lease_until > UTC_TIMESTAMP(6);
SELECT %(job_id)s AS id FROM DUAL WHERE ROW_COUNT() > 0;

-- name: database_now
-- The database clock now, in UTC whatever the session's time_zone.
SELECT UTC_TIMESTAMP(6) AS now;

-- name: lock_lease
-- Lock the job if it is still running under (worker_id, lease_token); return its error
-- history so a failure can be appended, and the database clock (UTC) to stamp it with.
-- The deadline is checked by record_failures.
-- A row another transaction holds locked is not awaited: NOWAIT fails the statement at
-- once (a transient conflict the caller tries again later), so the writer is not held up.
SELECT errors, UTC_TIMESTAMP(6) AS clock FROM dbqueue_job
WHERE id = %(job_id)s
  AND state = 'running' AND worker_id = %(worker_id)s AND lease_token = %(lease_token)s
FOR UPDATE NOWAIT;

-- name: lock_expired
-- Lock up to %(limit)s running jobs whose lease has run out, oldest deadline first.
-- Rows another reaper holds are skipped. Each row comes with the database clock (UTC), to
-- stamp the expiry with.
SELECT id, lease_token, task, attempts, max_attempts, worker_id, errors, backend,
       UTC_TIMESTAMP(6) AS clock
FROM dbqueue_job
WHERE state = 'running' AND lease_until < UTC_TIMESTAMP(6)
ORDER BY lease_until
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: record_failures
-- Record a failed attempt for each row of %(rows)s (JSON [{job_id, lease_token, worker_id,
-- retry_at, retry_in, code, last_error, errors}]): ready again at retry_at, or retry_in
-- seconds after the database clock, or dead when both are null or the attempt budget is
-- spent. With %(expired)s the lease must have run out (the reaper); otherwise it must
-- still be the caller's and live. The caller holds the row locks (lock_lease,
-- lock_expired), so a row still running afterwards was not settled.
-- Returns the ids and the state each one took.
UPDATE JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', lease_token BIGINT PATH '$.lease_token',
    worker_id VARCHAR(255) PATH '$.worker_id', retry_at DATETIME(6) PATH '$.retry_at',
    retry_in DOUBLE PATH '$.retry_in', code VARCHAR(100) PATH '$.code',
    last_error LONGTEXT PATH '$.last_error', errors JSON PATH '$.errors'
)) AS f
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = f.job_id
SET j.run_at = CASE WHEN f.retry_at IS NULL AND f.retry_in IS NULL
                         OR j.attempts >= j.max_attempts
                    THEN j.run_at
                    ELSE COALESCE(f.retry_at, UTC_TIMESTAMP(6)
                                  + INTERVAL ROUND(f.retry_in * 1000000) MICROSECOND) END,
    j.finished_at = CASE WHEN f.retry_at IS NULL AND f.retry_in IS NULL
                              OR j.attempts >= j.max_attempts
                         THEN UTC_TIMESTAMP(6) END,
    j.state = CASE WHEN f.retry_at IS NULL AND f.retry_in IS NULL
                        OR j.attempts >= j.max_attempts
                   THEN 'dead' ELSE 'ready' END,
    j.worker_id = NULL, j.lease_until = NULL,
    j.last_error_code = f.code, j.last_error = f.last_error, j.errors = f.errors
WHERE j.state = 'running' AND j.lease_token = f.lease_token
  AND CASE WHEN %(expired)s
           THEN j.lease_until < UTC_TIMESTAMP(6)
           ELSE j.worker_id = f.worker_id AND j.lease_until > UTC_TIMESTAMP(6) END;
SELECT j.id, j.state FROM JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id'
)) AS f
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = f.job_id
WHERE j.state <> 'running';

-- name: requeue
-- Give dead jobs in %(job_ids)s %(extra_attempts)s more attempts and make them due now.
-- max_attempts stops at 2147483647 (a 32-bit column): a budget at that limit stays there.
-- Id, attempts, dedupe key and history are kept; a cancel request is cleared. At most one job per (task, dedupe_key)
-- is revived: among the selected dead jobs sharing one, the lowest id (the `earlier`
-- join), and none while an unfinished job (waiting, ready or running: the generated
-- active_dedupe_key) holds it (the `a` join). Returns the ids requeued (marked by this
-- statement's run_at), each with whether a failed dependency edge leads from it (held:
-- its failure cancelled jobs that waited). (%(channel)s is unused: no NOTIFY.)
SET @dbqueue_requeued_at = UTC_TIMESTAMP(6);
UPDATE JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
LEFT JOIN dbqueue_job AS a ON a.task = j.task AND a.active_dedupe_key = j.dedupe_key
LEFT JOIN (
    JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS earlier_id
    STRAIGHT_JOIN dbqueue_job AS earlier FORCE INDEX (PRIMARY) ON earlier.id = earlier_id.value
) ON earlier.task = j.task AND earlier.dedupe_key = j.dedupe_key AND earlier.id < j.id
     AND earlier.state = 'dead'
SET j.state = 'ready', j.max_attempts = LEAST(j.max_attempts + %(extra_attempts)s, 2147483647),
    j.run_at = @dbqueue_requeued_at, j.finished_at = NULL, j.cancel_requested_at = NULL
WHERE j.state = 'dead' AND a.id IS NULL AND earlier.id IS NULL;
SELECT j.id,
       EXISTS (SELECT 1 FROM dbqueue_dependency AS e
               WHERE e.depends_on_id = j.id AND e.state = 'failed') AS held
FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
WHERE j.state = 'ready' AND j.run_at = @dbqueue_requeued_at;

-- name: run_now
-- Make the ready jobs in %(job_ids)s that are scheduled in the future due now.
-- Returns the ids changed (marked by this statement's run_at). (%(channel)s is unused.)
SET @dbqueue_moved_at = UTC_TIMESTAMP(6);
UPDATE JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
SET j.run_at = @dbqueue_moved_at
WHERE j.state = 'ready' AND j.run_at > @dbqueue_moved_at;
SELECT j.id FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
WHERE j.state = 'ready' AND j.run_at = @dbqueue_moved_at;

-- name: cancel
-- Cancel the ready and waiting jobs in %(job_ids)s. Running and finished jobs are left
-- alone. Returns the ids cancelled (marked by this statement's finished_at; the caller
-- settles their dependents).
SET @dbqueue_cancelled_at = UTC_TIMESTAMP(6);
UPDATE JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
SET j.state = 'cancelled', j.finished_at = @dbqueue_cancelled_at
WHERE j.state IN ('ready', 'waiting');
SELECT j.id FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
WHERE j.state = 'cancelled' AND j.finished_at = @dbqueue_cancelled_at;

-- name: request_cancel
-- Mark the running jobs in %(job_ids)s for cancellation (the first request's time is
-- kept); their heartbeat reads the mark from renew. Ready and finished jobs are left
-- alone. Returns the ids marked.
UPDATE JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
SET j.cancel_requested_at = COALESCE(j.cancel_requested_at, UTC_TIMESTAMP(6))
WHERE j.state = 'running';
SELECT j.id FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
WHERE j.state = 'running' AND j.cancel_requested_at IS NOT NULL;

-- name: cancel_running
-- End the leased job cancelled, with %(errors)s as its history (the cancellation
-- appended), because its task stopped on a cancel request. Applies only while the lease
-- is the caller's and live by the clock read once the row lock is held (lock_lease holds
-- it). Returns the id when it applied (marked by this statement's finished_at).
SET @dbqueue_cancelled_at = UTC_TIMESTAMP(6);
UPDATE dbqueue_job
SET state = 'cancelled', worker_id = NULL, lease_until = NULL,
    finished_at = @dbqueue_cancelled_at, last_error_code = %(code)s,
    last_error = %(last_error)s, errors = %(errors)s
WHERE id = %(job_id)s
  AND state = 'running' AND worker_id = %(worker_id)s AND lease_token = %(lease_token)s
  AND lease_until > @dbqueue_cancelled_at;
SELECT id FROM dbqueue_job
WHERE id = %(job_id)s AND state = 'cancelled' AND finished_at = @dbqueue_cancelled_at;

-- name: lock_dependencies
-- The jobs in %(job_ids)s that a job being enqueued will depend on, with their states, held
-- by a share lock until the enqueue's transaction ends: a completion, failure, cancel or
-- purge of one of them (each locks it exclusively) waits for the new edge or skips the
-- row, so none can finish unseen between this read and the edge's commit. LOCK IN SHARE
-- MODE, which MySQL 8 and MariaDB both accept (MariaDB has no FOR SHARE); the rows are
-- read by primary key only, so no other row is locked. Ids that match no job are missing
-- from the result.
SELECT j.id, j.state
FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
ORDER BY j.id
LOCK IN SHARE MODE;

-- name: insert_dependencies
-- Write the edges in %(rows)s (JSON [{job_id, depends_on_id, position, on_failure, state}]).
INSERT INTO dbqueue_dependency (job_id, depends_on_id, position, on_failure, state)
SELECT e.job_id, e.depends_on_id, e.position, e.on_failure, e.state
FROM JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$.job_id', depends_on_id BIGINT PATH '$.depends_on_id',
    position INT PATH '$.position', on_failure VARCHAR(8) PATH '$.on_failure',
    state VARCHAR(8) PATH '$.state'
)) AS e;

-- name: settle_edges
-- The jobs in %(finished)s (JSON [{id, failed}]) have just finished, failed meaning dead or
-- cancelled: settle their pending edges, resolved, or failed where a failure cancels the
-- dependent. The first statement locks those edges (through the (depends_on, job) index,
-- each finished job's own edges only) and decides each one's new state; the update then
-- reaches them by primary key. Returns, per dependent (in id order), how many edges were
-- resolved and the lowest dependency among those that failed (NULL: none).
SELECT e.id, e.job_id, e.depends_on_id,
       CASE WHEN f.failed = 'true' AND e.on_failure = 'cancel' THEN 'failed'
            ELSE 'resolved' END AS state
FROM JSON_TABLE(%(finished)s, '$[*]' COLUMNS (
    id BIGINT PATH '$.id', failed VARCHAR(5) PATH '$.failed'
)) AS f
STRAIGHT_JOIN dbqueue_dependency AS e FORCE INDEX (dbqueue_dependency_on) ON e.depends_on_id = f.id
WHERE e.state = 'pending'
ORDER BY e.id
FOR UPDATE;
UPDATE JSON_TABLE(%(previous)s, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', state VARCHAR(8) PATH '$[3]'
)) AS marked
STRAIGHT_JOIN dbqueue_dependency AS e FORCE INDEX (PRIMARY) ON e.id = marked.id
SET e.state = marked.state;
SELECT marked.job_id, COUNT(CASE WHEN marked.state = 'resolved' THEN 1 END) AS resolved,
       MIN(CASE WHEN marked.state = 'failed' THEN marked.depends_on_id END) AS failed_by
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (
    job_id BIGINT PATH '$[1]', depends_on_id BIGINT PATH '$[2]', state VARCHAR(8) PATH '$[3]'
)) AS marked
GROUP BY marked.job_id
ORDER BY marked.job_id;

-- name: reopen_edges
-- The dead jobs in %(job_ids)s were requeued: their failed edges are pending again (locked
-- first through the (depends_on, job) index, then updated by primary key).
-- Returns the dependents those edges held, in id order.
SELECT e.id, e.job_id
FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_dependency AS e FORCE INDEX (dbqueue_dependency_on)
    ON e.depends_on_id = requested.value
WHERE e.state = 'failed'
ORDER BY e.id
FOR UPDATE;
UPDATE JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS reopened
STRAIGHT_JOIN dbqueue_dependency AS e FORCE INDEX (PRIMARY) ON e.id = reopened.id
SET e.state = 'pending';
SELECT DISTINCT reopened.job_id
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (job_id BIGINT PATH '$[1]')) AS reopened
ORDER BY reopened.job_id;

-- name: lock_dependents
-- Lock the jobs in %(job_ids)s in id order (the caller sends them sorted; two settling
-- transactions then cannot deadlock on them); return what settling them needs: state,
-- pending count, error history and last error code, how many of their edges stand failed,
-- dedupe key, and the database clock (UTC) to stamp a history entry with. The second
-- statement reads them once the locks are held, with a plain read that locks no edge.
SELECT j.id FROM JSON_TABLE(%(job_ids)s, '$[*]' COLUMNS (value BIGINT PATH '$')) AS requested
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = requested.value
ORDER BY j.id
FOR UPDATE;
SELECT j.id, j.state, j.pending_dependencies, j.errors, j.last_error_code, j.task,
       j.dedupe_key,
       (SELECT COUNT(*) FROM dbqueue_dependency AS e FORCE INDEX (dbqueue_dependency_job)
        WHERE e.job_id = j.id AND e.state = 'failed') AS failed_edges,
       UTC_TIMESTAMP(6) AS clock
FROM JSON_TABLE(%(previous)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]')) AS locked
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = locked.id
ORDER BY j.id;

-- name: update_dependents
-- Write what settling decided for each locked dependent in %(rows)s (JSON [{id, resolved,
-- state, code, last_error, errors}]: pending count lowered by resolved; the state; the
-- error fields, unchanged where null). finished_at follows the state: cleared when it is
-- waiting or ready, stamped when it becomes terminal, kept when it was terminal already
-- (no expression reads a column the update sets, so the order MySQL assigns them in does
-- not matter). The history is written by a second update, of the rows that bring one: on
-- MariaDB a JSON_TABLE JSON column (utf8mb4_bin) and the errors column (the table's
-- collation) cannot meet in one COALESCE. Returns each job's id, state and queue.
-- (%(channel)s is unused: no NOTIFY.)
UPDATE JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    id BIGINT PATH '$.id', resolved INT PATH '$.resolved', state VARCHAR(16) PATH '$.state',
    code VARCHAR(100) PATH '$.code', last_error LONGTEXT PATH '$.last_error'
)) AS r
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = r.id
SET j.pending_dependencies = j.pending_dependencies - r.resolved,
    j.finished_at = CASE WHEN r.state IN ('waiting', 'ready', 'running') THEN NULL
                         ELSE COALESCE(j.finished_at, UTC_TIMESTAMP(6)) END,
    j.state = r.state,
    j.last_error_code = COALESCE(r.code, j.last_error_code),
    j.last_error = COALESCE(r.last_error, j.last_error);
UPDATE JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    id BIGINT PATH '$.id', errors JSON PATH '$.errors'
)) AS r
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = r.id
SET j.errors = r.errors
WHERE r.errors IS NOT NULL;
SELECT j.id, j.state, j.queue
FROM JSON_TABLE(%(rows)s, '$[*]' COLUMNS (id BIGINT PATH '$.id')) AS r
STRAIGHT_JOIN dbqueue_job AS j FORCE INDEX (PRIMARY) ON j.id = r.id;

-- name: workflow_jobs
-- The ids of every job linked to job %(job_id)s through dependencies, either way (its
-- workflow), itself included, at most %(limit)s of them, lowest first. Each recursive part
-- reads the CTE once, outside any subquery, as MySQL requires. Both servers cap the
-- iterations of a recursive CTE, one per step of the walk: MySQL fails the statement past
-- cte_max_recursion_depth (default 1000), which the SET_VAR hint lifts; MariaDB stops it
-- silently, with a warning, past max_recursive_iterations (default 1000), which the
-- SET STATEMENT prefix, in a comment only MariaDB executes, lifts. Each server takes the
-- other's for a comment. The walk ends anyway: UNION keeps each job once, so it takes at
-- most one step per job.
/*M!100600 SET STATEMENT max_recursive_iterations = 4294967295 FOR */
WITH RECURSIVE linked (id) AS (
    SELECT CAST(%(job_id)s AS SIGNED)
    UNION
    SELECT e.depends_on_id FROM linked AS l
    JOIN dbqueue_dependency AS e ON e.job_id = l.id
    UNION
    SELECT e.job_id FROM linked AS l
    JOIN dbqueue_dependency AS e ON e.depends_on_id = l.id
)
SELECT /*+ SET_VAR(cte_max_recursion_depth = 4294967295) */ id FROM linked
ORDER BY id
LIMIT %(limit)s;

-- name: loose_collations
-- MySQL/MariaDB only (the system check dbqueue.E019): every key and name column of the
-- app's tables (the CHAR and VARCHAR ones: keys, names, state, worker ids, error codes)
-- whose collation is not %(exact)s, the server's binary NO PAD one, so would compare its
-- values without case, accents or trailing spaces. No rows before the tables exist.
SELECT table_name AS table_name, column_name AS column_name, collation_name AS collation_name
FROM information_schema.columns
WHERE table_schema = DATABASE()
  AND table_name IN (
      'dbqueue_job', 'dbqueue_periodic_slot', 'dbqueue_queue_pause', 'dbqueue_limit',
      'dbqueue_rate_bucket'
  )
  AND data_type IN ('char', 'varchar') AND collation_name <> %(exact)s
ORDER BY table_name, ordinal_position;

-- name: transaction_open
-- MariaDB only: whether this session has a transaction open (1) or not (0), a raw
-- START TRANSACTION included, asked after task code ran. MySQL has no such variable.
SELECT @@in_transaction AS in_transaction;
