-- fenceq migration 0006: version 5 -> 6, for SQLite. Frozen at release.
--
-- Why: see 0006_fenceq_v6.py. External execution under a fence and job
-- history (docs/design-v6.md): the queue table gets requeue_priority,
-- history and history_retention (ALTER TABLE ... ADD COLUMN with constant
-- defaults rewrites no row), the dispatch and event tables are created
-- with their indexes and views, and the schema version moves to 6.

ALTER TABLE fenceq__queues ADD COLUMN requeue_priority TEXT NOT NULL DEFAULT 'keep'
    CHECK (requeue_priority IN ('keep', 'first', 'last'));
ALTER TABLE fenceq__queues ADD COLUMN history INTEGER NOT NULL DEFAULT 0;
ALTER TABLE fenceq__queues ADD COLUMN history_retention INTEGER;

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

-- The schema version, read by version.sql.
PRAGMA user_version = 6;
