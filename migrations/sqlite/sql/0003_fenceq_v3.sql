-- fenceq migration 0003: version 2 -> 3, for SQLite. Frozen at release.
--
-- Why: see 0003_fenceq_v3.py. The views are dropped; version 3's columns are
-- appended to the queue and job tables (ALTER TABLE ... ADD COLUMN rewrites
-- no row); its tables and indexes are created; the views are created again
-- with their appended columns; the schema version moves to 3.

DROP VIEW fenceq_jobs;

DROP VIEW fenceq_attempts;

DROP VIEW fenceq_queue_stats;

DROP VIEW fenceq_dead_letters;

ALTER TABLE fenceq__queues ADD COLUMN max_claimed INTEGER;

ALTER TABLE fenceq__queues ADD COLUMN max_claimed_per_key INTEGER;

ALTER TABLE fenceq__queues ADD COLUMN rate_limit INTEGER;

ALTER TABLE fenceq__queues ADD COLUMN rate_period INTEGER;

ALTER TABLE fenceq__queues ADD COLUMN notify_done INTEGER NOT NULL DEFAULT 0;

ALTER TABLE fenceq__jobs ADD COLUMN concurrency_key TEXT;

ALTER TABLE fenceq__jobs ADD COLUMN progress TEXT;

ALTER TABLE fenceq__jobs ADD COLUMN progress_at INTEGER;

CREATE TABLE fenceq__rate_window (
    queue      TEXT NOT NULL,
    claimed_at INTEGER NOT NULL
) STRICT;

CREATE TABLE fenceq__locks (
    lock       TEXT NOT NULL PRIMARY KEY,
    owner_id   TEXT,
    token      INTEGER NOT NULL CHECK (token >= 0),
    expires_at INTEGER,
    CHECK ((owner_id IS NULL) = (expires_at IS NULL))
) STRICT;

CREATE TABLE fenceq__schedules (
    schedule     TEXT NOT NULL PRIMARY KEY,
    queue        TEXT NOT NULL,
    task         TEXT NOT NULL,
    cron         TEXT NOT NULL,
    time_zone    TEXT NOT NULL,
    payload      TEXT,
    priority     INTEGER,
    max_attempts INTEGER,
    active_key   TEXT,
    paused       INTEGER NOT NULL,
    next_run_at  INTEGER,
    last_run_at  INTEGER,
    last_job_id  TEXT,
    revision     INTEGER NOT NULL
) STRICT;

CREATE INDEX fenceq__rate_window_queue_idx ON fenceq__rate_window (queue, claimed_at);

CREATE INDEX fenceq__schedules_due_idx
    ON fenceq__schedules (next_run_at)
    WHERE next_run_at IS NOT NULL;

CREATE VIEW fenceq_jobs AS
SELECT j.job_id, j.queue, j.task, j.payload, j.priority, j.status, j.attempts,
       j.max_attempts,
       strftime('%Y-%m-%dT%H:%M:%S', j.run_at / 1000000 - (j.run_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.run_at % 1000000 + 1000000) % 1000000) AS run_at,
       strftime('%Y-%m-%dT%H:%M:%S', j.expires_at / 1000000 - (j.expires_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.expires_at % 1000000 + 1000000) % 1000000) AS expires_at,
       j.owner_id, j.generation,
       strftime('%Y-%m-%dT%H:%M:%S', j.lease_expires_at / 1000000 - (j.lease_expires_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.lease_expires_at % 1000000 + 1000000) % 1000000) AS lease_expires_at,
       strftime('%Y-%m-%dT%H:%M:%S', j.budget_expires_at / 1000000 - (j.budget_expires_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.budget_expires_at % 1000000 + 1000000) % 1000000) AS budget_expires_at,
       j.cancel_requested, j.pid, j.result, j.last_error, j.submission_id, j.fingerprint,
       j.active_key, j.dlq_id,
       strftime('%Y-%m-%dT%H:%M:%S', j.created_at / 1000000 - (j.created_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.created_at % 1000000 + 1000000) % 1000000) AS created_at,
       strftime('%Y-%m-%dT%H:%M:%S', j.finished_at / 1000000 - (j.finished_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.finished_at % 1000000 + 1000000) % 1000000) AS finished_at,
       j.concurrency_key,
       0 AS blocked_by,  -- differs from PostgreSQL: no dependencies on SQLite yet
       j.progress,
       strftime('%Y-%m-%dT%H:%M:%S', j.progress_at / 1000000 - (j.progress_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.progress_at % 1000000 + 1000000) % 1000000) AS progress_at
  FROM fenceq__jobs AS j;

CREATE VIEW fenceq_checkpoints AS
SELECT c.job_id, c.step, c.value, c.generation,
       strftime('%Y-%m-%dT%H:%M:%S', c.recorded_at / 1000000 - (c.recorded_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (c.recorded_at % 1000000 + 1000000) % 1000000) AS recorded_at
  FROM fenceq__checkpoints AS c;

CREATE VIEW fenceq_attempts AS
SELECT c.job_id, c.generation, c.owner_id,
       strftime('%Y-%m-%dT%H:%M:%S', c.claimed_at / 1000000 - (c.claimed_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (c.claimed_at % 1000000 + 1000000) % 1000000) AS claimed_at
  FROM fenceq__claims AS c;

CREATE VIEW fenceq_queue_stats AS
SELECT q.queue,
       (SELECT count(*) FROM fenceq__jobs AS j
         WHERE j.queue = q.queue AND j.status = 'pending') AS pending,
       (SELECT count(*) FROM fenceq__jobs AS j
         WHERE j.queue = q.queue AND j.status = 'pending' AND j.run_at <= n.now) AS due,
       (SELECT count(*) FROM fenceq__jobs AS j
         WHERE j.queue = q.queue AND j.status = 'claimed') AS claimed,
       (SELECT count(*) FROM fenceq__jobs AS j
         WHERE j.queue = q.queue AND j.status = 'claimed' AND j.cancel_requested) AS cancel_requested,
       n.now - (SELECT min(j.run_at) FROM fenceq__jobs AS j
                 WHERE j.queue = q.queue AND j.status = 'pending' AND j.run_at <= n.now) AS oldest_due_age,
       q.paused,
       q.notify,
       q.max_claimed,
       q.max_claimed_per_key,
       coalesce((SELECT max(k.claimed) FROM (
           SELECT count(*) AS claimed FROM fenceq__jobs AS j
            WHERE j.queue = q.queue AND j.status = 'claimed' AND j.concurrency_key IS NOT NULL
              AND q.max_claimed_per_key IS NOT NULL
            GROUP BY j.concurrency_key) AS k), 0) AS busiest_key_claimed,
       q.rate_limit,
       q.rate_period,
       (SELECT count(*) FROM fenceq__rate_window AS w
         WHERE w.queue = q.queue AND w.claimed_at > n.now - q.rate_period) AS rate_used,
       0 AS blocked  -- differs from PostgreSQL: no dependencies on SQLite yet
  FROM fenceq__queues AS q,
       (SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000 AS now) AS n;

CREATE VIEW fenceq_dead_letters AS
SELECT d.dlq_id, d.job_id, d.queue, d.task, d.error, d.attempts,
       strftime('%Y-%m-%dT%H:%M:%S', d.failed_at / 1000000 - (d.failed_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (d.failed_at % 1000000 + 1000000) % 1000000) AS failed_at,
       strftime('%Y-%m-%dT%H:%M:%S', d.replayed_at / 1000000 - (d.replayed_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (d.replayed_at % 1000000 + 1000000) % 1000000) AS replayed_at,
       strftime('%Y-%m-%dT%H:%M:%S', d.discarded_at / 1000000 - (d.discarded_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (d.discarded_at % 1000000 + 1000000) % 1000000) AS discarded_at
  FROM fenceq__dead_letters AS d;

CREATE VIEW fenceq_locks AS
SELECT l.lock, l.owner_id, l.token,
       strftime('%Y-%m-%dT%H:%M:%S', l.expires_at / 1000000 - (l.expires_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (l.expires_at % 1000000 + 1000000) % 1000000) AS expires_at
  FROM fenceq__locks AS l;

CREATE VIEW fenceq_schedules AS
SELECT s.schedule, s.queue, s.task, s.cron, s.time_zone, s.payload, s.priority, s.max_attempts,
       s.active_key, s.paused,
       strftime('%Y-%m-%dT%H:%M:%S', s.next_run_at / 1000000 - (s.next_run_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (s.next_run_at % 1000000 + 1000000) % 1000000) AS next_run_at,
       strftime('%Y-%m-%dT%H:%M:%S', s.last_run_at / 1000000 - (s.last_run_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (s.last_run_at % 1000000 + 1000000) % 1000000) AS last_run_at,
       s.last_job_id
  FROM fenceq__schedules AS s;

PRAGMA user_version = 3;
