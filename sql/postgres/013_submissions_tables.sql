-- fenceq for PostgreSQL, part 1: what a submission records besides its job.
--
-- What it holds: submission identities (_submissions) and the dependencies
-- between jobs (_dependencies).
-- Who writes it: _submit, behind submit and submit_batch (040_submit.sql),
-- inserts both; _settle_dependents (045_dependencies.sql) marks a
-- dependency satisfied when the job depended on completes; purge
-- (060_operators.sql) deletes the dependencies of the jobs it deletes.

-- Submission identities: outlive their jobs (purge) so that a replay keeps
-- answering with the original job id (docs/guarantees.md §4). job_id is deliberately
-- not unique here: _jobs' primary key arbitrates job ids, so a race between
-- two explicit job ids surfaces as QF203, never as a raw unique violation.
CREATE TABLE IF NOT EXISTS fenceq._submissions (
    submission_id text COLLATE "C" NOT NULL,
    fingerprint   text COLLATE "C" NOT NULL,
    job_id        text COLLATE "C" NOT NULL,
    queue         text COLLATE "C" NOT NULL,
    created_at    timestamptz NOT NULL,
    CONSTRAINT _submissions_pkey PRIMARY KEY (submission_id)
);
CREATE INDEX IF NOT EXISTS _submissions_job_idx ON fenceq._submissions (job_id);

-- Dependencies (version 3, docs/guarantees.md §16): job_id may not be
-- claimed before depends_on completes (how a waiting job looks in _jobs:
-- blocked_by, 012_jobs_table.sql).
CREATE TABLE IF NOT EXISTS fenceq._dependencies (
    depends_on text COLLATE "C" NOT NULL,
    job_id     text COLLATE "C" NOT NULL,
    satisfied  boolean NOT NULL DEFAULT false,
    CONSTRAINT _dependencies_pkey PRIMARY KEY (depends_on, job_id)
);
CREATE INDEX IF NOT EXISTS _dependencies_job_idx ON fenceq._dependencies (job_id);
