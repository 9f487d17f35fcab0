-- fenceq for PostgreSQL, part 1c: jobs due later wait apart (version 5).
--
-- What it holds: a pending job is in exactly one of two sets, told apart by
-- _jobs.scheduled:
--   * ready (scheduled = false): due; each queue's ready jobs lead its
--     stretch of _jobs_pending_idx, in claim order (priority, run_at,
--     submission order), and every claim reads them there;
--   * later (scheduled = true): due at a run_at still ahead when it was
--     written (submitted for later, a retry in back-off, released for
--     later, waiting on dependencies with run_at 'infinity'); they follow
--     the ready ones in _jobs_pending_idx (where the dashboard and
--     queue_stats count every pending job) and are also in
--     _jobs_later_idx, by due time.
-- Who writes it: every statement that makes a job pending sets scheduled to
-- whether its run_at is after the clock of that statement; a claim of a
-- queue first moves the queue's jobs that have fallen due from later to
-- ready (_move_due), so a due job is claimable by the first claim after its
-- run_at, as in version 4. Why: in version 4 one claim index held both, and
-- a claim or next_due with many jobs due later read past all of them (an
-- empty claim 7.5 ms, next_due 31.5 ms with 100,000 such jobs); now each
-- is one index probe (docs/design-v5.md).
--
-- A job whose scheduled flag is false while its run_at is ahead is still
-- never claimed early (every claim also compares run_at with its clock):
-- the flag decides where a job waits, never whether it is due.
--
-- Idempotent like part 1, and an upgrade from version 4 in itself: the
-- column has a constant default (no row is rewritten) and the version 4
-- claim index is replaced. The pending jobs version 4 left waiting for a
-- later run_at are not marked here, inside the step's ACCESS EXCLUSIVE
-- lock: `fenceq migrate` marks them after the step commits, in batches of
-- row locks (docs/dba.md §7). Until then they wait among the due jobs,
-- which is correct (every claim compares run_at with its clock) but costs
-- an empty claim what it cost in version 4.

ALTER TABLE fenceq._jobs
    ADD COLUMN IF NOT EXISTS scheduled boolean NOT NULL DEFAULT false;

-- Claim path: one ordered scan per queue over its ready jobs
-- (docs/guarantees.md §11: a single index over queue = ANY(...) cannot
-- serve ORDER BY, so claims merge per-queue heads).
CREATE INDEX IF NOT EXISTS _jobs_pending_idx
    ON fenceq._jobs (queue, scheduled, priority DESC, run_at, seq)
    WHERE status = 'pending';
-- Jobs due later, by due time: the claim's move and next_due read its head.
CREATE INDEX IF NOT EXISTS _jobs_later_idx
    ON fenceq._jobs (queue, run_at)
    WHERE status = 'pending' AND scheduled;
DROP INDEX IF EXISTS fenceq._jobs_claim_idx;
