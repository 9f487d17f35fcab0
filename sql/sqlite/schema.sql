-- fenceq for SQLite: the schema (tables, indexes, views). Version 8.
-- Generated from templates/schema.sql by scripts/gen-sqlite: edit the template.
--
-- How to run: `fenceq migrate` (or apply `fenceq sql --backend sqlite`, which
-- wraps this file in a transaction, switches the file to WAL and records the
-- migration). Statements end with ';' at the end of a line; run them in one
-- transaction. Idempotent: every object is created only when missing.
-- `fenceq verify` checks the result.
--
-- Names: PostgreSQL's schema-qualified names with the dot replaced by an
-- underscore. Private tables fenceq._jobs -> fenceq__jobs; public views
-- fenceq.jobs -> fenceq_jobs. Tables are private: use the statement files.
--
-- Types. Every table is STRICT, so storage never coerces a value silently.
-- Identity columns are TEXT with SQLite's default BINARY collation (exact
-- byte comparison). Timestamps are INTEGER microseconds since 1970-01-01 UTC
-- (exact, ordered, cheap arithmetic); the views and the statement files show
-- them as UTC text YYYY-MM-DDTHH:MM:SS.ffffffZ. Intervals are INTEGER
-- microseconds, booleans INTEGER 0/1, JSON canonical TEXT (docs/guarantees.md §4).
--
-- Differs from PostgreSQL in that there are no roles, grants or functions:
-- whoever can open the file can write every table, and the operations are
-- the statement files next to this one.

-- Queues: named lanes with their defaults.
CREATE TABLE IF NOT EXISTS fenceq__queues (
    queue          TEXT NOT NULL PRIMARY KEY,
    lease          INTEGER NOT NULL,
    max_attempts   INTEGER NOT NULL,
    backoff_base   INTEGER NOT NULL,
    backoff_factor REAL NOT NULL,
    backoff_max    INTEGER NOT NULL,
    dead_letter    INTEGER NOT NULL,
    paused         INTEGER NOT NULL DEFAULT 0,
    notify         INTEGER NOT NULL DEFAULT 1,
    created_at     INTEGER NOT NULL,
    -- Added in version 3 (an upgrade appends them with ALTER TABLE):
    max_claimed         INTEGER,
    max_claimed_per_key INTEGER,
    rate_limit          INTEGER,
    rate_period         INTEGER,
    notify_done         INTEGER NOT NULL DEFAULT 0,
    -- Added in version 6 (docs/design-v6.md): where a job requeued by reap
    -- re-enters (keep, first, last), whether the queue's jobs write events,
    -- and how long purge keeps them (microseconds; NULL: as long as the job).
    requeue_priority    TEXT NOT NULL DEFAULT 'keep' CHECK (requeue_priority IN ('keep', 'first', 'last')),
    history             INTEGER NOT NULL DEFAULT 0,
    history_retention   INTEGER
) STRICT;

-- Jobs: one row per job, carrying its current fence (owner_id, generation,
-- claim_token). seq is the rowid: submission order, the last claim tie-break.
CREATE TABLE IF NOT EXISTS fenceq__jobs (
    seq               INTEGER PRIMARY KEY,
    job_id            TEXT NOT NULL UNIQUE,
    queue             TEXT NOT NULL,
    task              TEXT NOT NULL,
    payload           TEXT,
    priority          INTEGER NOT NULL,
    status            TEXT NOT NULL DEFAULT 'pending' CHECK (status IN
        ('pending', 'claimed', 'completed', 'failed', 'cancelled', 'expired')),
    attempts          INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts      INTEGER NOT NULL CHECK (max_attempts > 0),
    run_at            INTEGER NOT NULL,
    expires_at        INTEGER,
    owner_id          TEXT,
    generation        INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    claim_token       TEXT,
    lease             INTEGER,
    lease_expires_at  INTEGER,
    budget_expires_at INTEGER,
    cancel_requested  INTEGER NOT NULL DEFAULT 0,
    pid               INTEGER,
    result            TEXT,
    last_error        TEXT,
    submission_id     TEXT,
    fingerprint       TEXT,
    active_key        TEXT,
    dlq_id            TEXT,
    created_at        INTEGER NOT NULL,
    finished_at       INTEGER,
    -- Added in version 3 (an upgrade appends them with ALTER TABLE):
    concurrency_key   TEXT,
    progress          TEXT,
    progress_at       INTEGER,
    -- Added in version 4: a job waiting on dependencies (docs/guarantees.md
    -- §16) is pending with blocked_by > 0 (its dependencies not completed
    -- yet) and run_at 253402300800000000 (year 10000: after every time a
    -- job may ask for), so claims pass over it as over a job due later; the
    -- run_at it asked for waits in blocked_run_at.
    blocked_by        INTEGER CHECK (blocked_by > 0),
    blocked_run_at    INTEGER,
    -- Added in version 5: a pending job waits in one of two sets. Ready
    -- (scheduled = 0): due; each queue's ready jobs lead its stretch of
    -- fenceq__jobs_pending_idx in claim order, and every claim reads them
    -- there. Later (scheduled = 1): its run_at was still ahead when it was
    -- written (submitted for later, a retry in back-off, released for
    -- later, waiting on dependencies); also in fenceq__jobs_later_idx by
    -- due time, where each claim first moves its queues' jobs that fell
    -- due (docs/design-v5.md §3). The flag decides where a job waits, never
    -- whether it is due: every claim also compares run_at with its clock.
    scheduled         INTEGER NOT NULL DEFAULT 0,
    -- Added in version 8: each claim of the job by claim_jobs, oldest
    -- first, as a JSON array of {"generation", "owner_id", "claimed_at"
    -- (INTEGER microseconds), "claim_nonce"}; NULL until its first such
    -- claim. Per-token claims (claim_next, claim_batch, adopt_dispatch)
    -- stay in fenceq__claims rows.
    call_claims       TEXT
) STRICT;

-- Claim path: one ordered scan per queue over its ready jobs (claim_next
-- merges the heads); the jobs due later follow them (version 5).
CREATE INDEX IF NOT EXISTS fenceq__jobs_pending_idx
    ON fenceq__jobs (queue, scheduled, priority DESC, run_at, seq)
    WHERE status = 'pending';
-- Jobs due later, by due time: the claims' move and next_due read its head.
CREATE INDEX IF NOT EXISTS fenceq__jobs_later_idx
    ON fenceq__jobs (queue, run_at)
    WHERE status = 'pending' AND scheduled;
-- Claimed jobs: reap and queue_stats read them without terminal history.
CREATE INDEX IF NOT EXISTS fenceq__jobs_claimed_idx
    ON fenceq__jobs (queue, lease_expires_at)
    WHERE status = 'claimed';
-- At most one active job per (queue, active_key) (docs/guarantees.md §5).
CREATE UNIQUE INDEX IF NOT EXISTS fenceq__jobs_active_key_idx
    ON fenceq__jobs (queue, active_key)
    WHERE active_key IS NOT NULL AND status IN ('pending', 'claimed');
-- reap turns overdue pending jobs into 'expired', oldest first.
CREATE INDEX IF NOT EXISTS fenceq__jobs_expires_idx
    ON fenceq__jobs (expires_at)
    WHERE status = 'pending' AND expires_at IS NOT NULL;
-- purge deletes terminal jobs, oldest first.
CREATE INDEX IF NOT EXISTS fenceq__jobs_finished_idx
    ON fenceq__jobs (finished_at)
    WHERE finished_at IS NOT NULL;

-- Submission identities: outlive their jobs (purge) so that a replay keeps
-- answering with the original job id (docs/guarantees.md §4).
CREATE TABLE IF NOT EXISTS fenceq__submissions (
    submission_id TEXT NOT NULL PRIMARY KEY,
    fingerprint   TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    queue         TEXT NOT NULL,
    created_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS fenceq__submissions_job_idx ON fenceq__submissions (job_id);

-- The claim ledger: every token and every claim_jobs nonce used in a
-- successful claim (the primary key makes them one namespace), until
-- purge removes its jobs. A per-token row names its job and generation; a
-- claim_jobs call's row (version 8) names neither and lists the call's
-- jobs in claim order (job_ids, a JSON array). With the jobs' call_claims,
-- the source of the fenceq_attempts view.
CREATE TABLE IF NOT EXISTS fenceq__claims (
    claim_token TEXT NOT NULL PRIMARY KEY,
    job_id      TEXT,
    generation  INTEGER,
    owner_id    TEXT NOT NULL,
    claimed_at  INTEGER NOT NULL,
    job_ids     TEXT,
    CHECK ((job_id IS NULL) = (job_ids IS NOT NULL) AND (job_id IS NULL) = (generation IS NULL))
) STRICT;
CREATE INDEX IF NOT EXISTS fenceq__claims_job_idx ON fenceq__claims (job_id, generation);

-- Checkpoints: one recorded value per (job, step), written once.
CREATE TABLE IF NOT EXISTS fenceq__checkpoints (
    job_id      TEXT NOT NULL,
    step        TEXT NOT NULL,
    value       TEXT NOT NULL,
    generation  INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, step)
) STRICT, WITHOUT ROWID;

-- Dead letters: written by fail/reap in the same transaction as the failure.
CREATE TABLE IF NOT EXISTS fenceq__dead_letters (
    dlq_id       TEXT NOT NULL PRIMARY KEY,
    job_id       TEXT NOT NULL,
    queue        TEXT NOT NULL,
    task         TEXT NOT NULL,
    error        TEXT,
    attempts     INTEGER NOT NULL,
    failed_at    INTEGER NOT NULL,
    replayed_at  INTEGER,
    discarded_at INTEGER
) STRICT;
CREATE INDEX IF NOT EXISTS fenceq__dead_letters_job_idx ON fenceq__dead_letters (job_id);

-- Views: read-only windows, columns as PostgreSQL's views (only ever
-- appended). No view shows a claim token. Timestamps as UTC text
-- (templates/macros.sql: micros_utc_text).
CREATE VIEW IF NOT EXISTS fenceq_jobs AS
SELECT j.job_id, j.queue, j.task, j.payload, j.priority, j.status, j.attempts,
       j.max_attempts,
       -- the run_at it asked for, also while it waits on dependencies
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

CREATE VIEW IF NOT EXISTS fenceq_checkpoints AS
SELECT c.job_id, c.step, c.value, c.generation,
       strftime('%Y-%m-%dT%H:%M:%S', c.recorded_at / 1000000 - (c.recorded_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (c.recorded_at % 1000000 + 1000000) % 1000000) AS recorded_at
  FROM fenceq__checkpoints AS c;

-- One row per successful claim of a job: the per-token rows, then the
-- claims of claim_jobs calls, from the jobs' call_claims.
CREATE VIEW IF NOT EXISTS fenceq_attempts AS
SELECT c.job_id, c.generation, c.owner_id,
       strftime('%Y-%m-%dT%H:%M:%S', c.claimed_at / 1000000 - (c.claimed_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (c.claimed_at % 1000000 + 1000000) % 1000000) AS claimed_at
  FROM fenceq__claims AS c
 WHERE c.job_id IS NOT NULL
UNION ALL
SELECT j.job_id, a.value ->> 'generation', a.value ->> 'owner_id',
       strftime('%Y-%m-%dT%H:%M:%S', (a.value ->> 'claimed_at') / 1000000 - ((a.value ->> 'claimed_at') % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', ((a.value ->> 'claimed_at') % 1000000 + 1000000) % 1000000)
  FROM fenceq__jobs AS j JOIN json_each(j.call_claims) AS a;

-- queue_stats reads pending and claimed jobs through their partial indexes,
-- never the terminal history. oldest_due_age is in microseconds.
CREATE VIEW IF NOT EXISTS fenceq_queue_stats AS
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

CREATE VIEW IF NOT EXISTS fenceq_dead_letters AS
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

-- The rate window: one row per successful claim of a queue with a rate
-- limit, kept for one rate_period (claims prune the older ones).
CREATE TABLE IF NOT EXISTS fenceq__rate_window (
    queue      TEXT NOT NULL,
    claimed_at INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS fenceq__rate_window_queue_idx ON fenceq__rate_window (queue, claimed_at);

-- Named locks (docs/guarantees.md §15): one row per lock name ever acquired.
-- A release clears owner_id and expires_at but keeps the row and its token,
-- so that the lock's fencing tokens only rise, across releases too. A row is
-- held while owner_id is set and expires_at is after now.
CREATE TABLE IF NOT EXISTS fenceq__locks (
    lock       TEXT NOT NULL PRIMARY KEY,
    owner_id   TEXT,
    token      INTEGER NOT NULL CHECK (token >= 0),
    expires_at INTEGER,
    CHECK ((owner_id IS NULL) = (expires_at IS NULL))
) STRICT;

CREATE VIEW IF NOT EXISTS fenceq_locks AS
SELECT l.lock, l.owner_id, l.token,
       strftime('%Y-%m-%dT%H:%M:%S', l.expires_at / 1000000 - (l.expires_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (l.expires_at % 1000000 + 1000000) % 1000000) AS expires_at
  FROM fenceq__locks AS l;

-- Periodic schedules (docs/guarantees.md §14): the job each submits, its
-- cron expression as written (the client evaluates it: SQLite has no time
-- zones), the next occurrence tick submits (NULL while paused or when none
-- is left before year 10000), and revision, raised by every change of the
-- definition, which tick's caller reads and tick.sql compares.
CREATE TABLE IF NOT EXISTS fenceq__schedules (
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
-- tick reads the due schedules, the longest due first.
CREATE INDEX IF NOT EXISTS fenceq__schedules_due_idx
    ON fenceq__schedules (next_run_at)
    WHERE next_run_at IS NOT NULL;

CREATE VIEW IF NOT EXISTS fenceq_schedules AS
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

-- Dependencies (docs/guarantees.md §16): job_id may be claimed once
-- depends_on completed (satisfied). Written by submit and submit_batch;
-- complete and complete_batch satisfy the edges of a completed job; the
-- files that end a job otherwise cancel its dependents.
CREATE TABLE IF NOT EXISTS fenceq__dependencies (
    depends_on TEXT NOT NULL,
    job_id     TEXT NOT NULL,
    satisfied  INTEGER NOT NULL,
    PRIMARY KEY (depends_on, job_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fenceq__dependencies_job_idx ON fenceq__dependencies (job_id);

CREATE VIEW IF NOT EXISTS fenceq_dependencies AS
SELECT d.job_id, d.depends_on, d.satisfied
  FROM fenceq__dependencies AS d;

-- External execution (version 6, docs/design-v6.md): one row per job that
-- reserved a dispatch. It is live while its job is claimed under the
-- row's generation; the calls that end a claim leave the row (it stops
-- being live), release_dispatch deletes it, a later claim's reservation
-- overwrites it, purge deletes it with its job.
CREATE TABLE IF NOT EXISTS fenceq__dispatches (
    job_id          TEXT NOT NULL PRIMARY KEY,
    backend         TEXT NOT NULL,
    generation      INTEGER NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('reserved', 'running')),
    reservation_ref TEXT NOT NULL,
    execution_ref   TEXT,
    reserved_at     INTEGER NOT NULL,
    finalized_at    INTEGER,
    checked_at      INTEGER
) STRICT, WITHOUT ROWID;

CREATE VIEW IF NOT EXISTS fenceq_dispatches AS
SELECT d.job_id, j.queue, d.backend, d.state, d.reservation_ref, d.execution_ref, j.owner_id, d.generation,
       strftime('%Y-%m-%dT%H:%M:%S', j.lease_expires_at / 1000000 - (j.lease_expires_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (j.lease_expires_at % 1000000 + 1000000) % 1000000) AS lease_expires_at,
       strftime('%Y-%m-%dT%H:%M:%S', d.checked_at / 1000000 - (d.checked_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (d.checked_at % 1000000 + 1000000) % 1000000) AS checked_at
  FROM fenceq__dispatches AS d JOIN fenceq__jobs AS j ON j.job_id = d.job_id
 WHERE j.status = 'claimed' AND j.generation = d.generation;

-- Job history (version 6): one row per transition of a job while its
-- queue has history on, written in the transaction of the transition.
-- seq (the rowid) orders a job's timeline; detail is a JSON object.
CREATE TABLE IF NOT EXISTS fenceq__events (
    seq        INTEGER PRIMARY KEY,
    job_id     TEXT NOT NULL,
    queue      TEXT NOT NULL,
    at         INTEGER NOT NULL,
    event      TEXT NOT NULL,
    generation INTEGER,
    owner_id   TEXT,
    detail     TEXT NOT NULL
) STRICT;
-- A job's timeline (get_job_events), and purge with its job.
CREATE INDEX IF NOT EXISTS fenceq__events_job_idx ON fenceq__events (job_id, seq);
-- purge's retention, per queue, oldest first.
CREATE INDEX IF NOT EXISTS fenceq__events_queue_at_idx ON fenceq__events (queue, at);

CREATE VIEW IF NOT EXISTS fenceq_job_events AS
SELECT e.job_id, e.seq,
       strftime('%Y-%m-%dT%H:%M:%S', e.at / 1000000 - (e.at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (e.at % 1000000 + 1000000) % 1000000) AS at,
       e.event, e.generation, e.owner_id, e.detail
  FROM fenceq__events AS e;

-- The operator's view over time (version 7, docs/design-v7.md §1): one row
-- per queue and closed minute (minute: its start), written once by
-- sample_activity, never on the hot path. The depth (pending, due,
-- running) is the live count when the row was sampled, NULL for a minute
-- caught up later. wait_hist and run_hist are JSON arrays of counts, bucket
-- k holding the durations of floor(4 * log2(max(ms, 1))) = k (at most
-- 127), trimmed at the last non-zero one. It holds no job ids: purge leaves
-- it; sample_activity deletes what is older than its keep. Read by the
-- primary key: a queue's range of minutes.
CREATE TABLE IF NOT EXISTS fenceq__activity (
    queue     TEXT NOT NULL,
    minute    INTEGER NOT NULL,
    submitted INTEGER NOT NULL,
    claimed   INTEGER NOT NULL,
    retried   INTEGER NOT NULL,
    completed INTEGER NOT NULL,
    failed    INTEGER NOT NULL,
    cancelled INTEGER NOT NULL,
    expired   INTEGER NOT NULL,
    pending   INTEGER,
    due       INTEGER,
    running   INTEGER,
    wait_hist TEXT NOT NULL,
    run_hist  TEXT NOT NULL,
    PRIMARY KEY (queue, minute)
) STRICT, WITHOUT ROWID;
-- replay_dead_letters reads a queue's open letters, oldest first, without
-- reading the handled ones, which stay until purge removes their jobs.
CREATE INDEX IF NOT EXISTS fenceq__dead_letters_unhandled_idx
    ON fenceq__dead_letters (queue, failed_at)
    WHERE replayed_at IS NULL AND discarded_at IS NULL;

-- The schema version, read by version.sql.
PRAGMA user_version = 8;
