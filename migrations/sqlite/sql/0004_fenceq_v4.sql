-- fenceq migration 0004: version 3 -> 4, for SQLite. Frozen at release.
--
-- Why: see 0004_fenceq_v4.py. The two views that gain dependency columns
-- are dropped; the job table gets blocked_by and blocked_run_at (ALTER
-- TABLE ... ADD COLUMN rewrites no row); the dependency table, its index
-- and view are created; the views are created again; the schema version
-- moves to 4.

DROP VIEW fenceq_jobs;

DROP VIEW fenceq_queue_stats;

ALTER TABLE fenceq__jobs ADD COLUMN blocked_by INTEGER CHECK (blocked_by > 0);

ALTER TABLE fenceq__jobs ADD COLUMN blocked_run_at INTEGER;

CREATE TABLE fenceq__dependencies (
    depends_on TEXT NOT NULL,
    job_id     TEXT NOT NULL,
    satisfied  INTEGER NOT NULL,
    PRIMARY KEY (depends_on, job_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX fenceq__dependencies_job_idx ON fenceq__dependencies (job_id);

CREATE VIEW fenceq_jobs AS
SELECT j.job_id, j.queue, j.task, j.payload, j.priority, j.status, j.attempts,
       j.max_attempts,
       CASE WHEN j.blocked_run_at IS NULL
            THEN strftime('%Y-%m-%dT%H:%M:%S', j.run_at / 1000000 - (j.run_at % 1000000 < 0),
                          'unixepoch')
                 || printf('.%06dZ', (j.run_at % 1000000 + 1000000) % 1000000)
            ELSE strftime('%Y-%m-%dT%H:%M:%S', j.blocked_run_at / 1000000 - (j.blocked_run_at % 1000000 < 0),
                          'unixepoch')
                 || printf('.%06dZ', (j.blocked_run_at % 1000000 + 1000000) % 1000000) END AS run_at,
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
       coalesce(j.blocked_by, 0) AS blocked_by,
       j.progress,
       strftime('%Y-%m-%dT%H:%M:%S', j.progress_at / 1000000 - (j.progress_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.progress_at % 1000000 + 1000000) % 1000000) AS progress_at
  FROM fenceq__jobs AS j;

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
       (SELECT count(*) FROM fenceq__jobs AS j
         WHERE j.queue = q.queue AND j.status = 'pending' AND j.blocked_by IS NOT NULL) AS blocked
  FROM fenceq__queues AS q,
       (SELECT (unixepoch('now') * 1000 + CAST(substr(strftime('%f', 'now'), 4) AS INTEGER)) * 1000 AS now) AS n;

CREATE VIEW fenceq_dependencies AS
SELECT d.job_id, d.depends_on, d.satisfied
  FROM fenceq__dependencies AS d;

PRAGMA user_version = 4;
