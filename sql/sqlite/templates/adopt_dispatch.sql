-- fenceq for SQLite: adopt_dispatch -- take over a lapsed claim whose work runs elsewhere.
--
-- One claim row when the job is claimed, its lease has lapsed
-- (lease_expires_at <= now, the clock read after BEGIN IMMEDIATE took the
-- write lock), its live dispatch is for backend, and the recorded ref (the
-- reservation ref while reserved, the execution ref while running) is
-- exactly expected_ref. The job stays claimed: generation + 1, the new
-- owner and token, lease from :lease or the queue's, no budget; attempts
-- is not incremented (the row's attempt is the job's attempts). The token
-- goes into the claim ledger; the dispatch follows the new generation and
-- keeps its checked_at. A requested cancel does not refuse (the adopter
-- stops the work and acknowledges). No row otherwise (a live claim,
-- another ref or backend, no dispatch, an unknown job). QF102 for a bad
-- job id, backend (1 to 255 characters), ref (1 to 1,024), owner or token, QF105 for a
-- lease that is not positive; for an adoption, QF303 when the generation
-- cannot advance, then QF301 for a token used before. Event
-- dispatch_adopted.
--
-- Parameters: :job_id TEXT (1 to 36 characters); :backend TEXT;
-- :expected_ref TEXT; :owner_id TEXT; :claim_token TEXT; :lease INTEGER
-- microseconds or NULL.
-- Result: zero or one row (sqlstate, message, detail, then the claim
-- columns as claim_next returns them), or one error row.
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that a lease ending after year 9999 raises
-- 22008 (PostgreSQL: timestamp out of range).
{{error_table}}
{{first_failing(
    {{name_check(job_id, 36)}}
    {{name_check(backend, 255)}}
    {{name_check(expected_ref, 1024)}}
    {{name_check(owner_id, 255)}}
    {{name_check(claim_token, 255)}}
    WHEN NOT {{optional_integer(:lease, > 0)}}
         THEN 'QF105 fenceq: lease must be positive')}}
-- The job to adopt: its row, generation and previous owner before the
-- adoption, the new lease and the clock reading of the whole call.
CREATE TEMP TABLE IF NOT EXISTS fenceq_adopt (
    seq INTEGER NOT NULL, generation INTEGER NOT NULL, previous_owner_id TEXT, lease INTEGER NOT NULL,
    now INTEGER NOT NULL);
DELETE FROM temp.fenceq_adopt;
WITH {{clock}}
INSERT INTO temp.fenceq_adopt (seq, generation, previous_owner_id, lease, now)
SELECT j.seq, j.generation, j.owner_id, coalesce(:lease, q.lease), clock.now
  FROM clock
  JOIN fenceq__jobs AS j ON j.job_id = :job_id
  JOIN fenceq__dispatches AS d ON d.job_id = j.job_id AND d.generation = j.generation
  JOIN fenceq__queues AS q ON q.queue = j.queue
 WHERE j.status = 'claimed' AND j.lease_expires_at <= clock.now AND d.backend = :backend
   AND CASE d.state WHEN 'reserved' THEN d.reservation_ref ELSE d.execution_ref END = :expected_ref
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    SELECT 1 AS rank, 'QF303' AS sqlstate, 'fenceq: the job''s generation is exhausted' AS message
      FROM temp.fenceq_adopt AS a
     WHERE a.generation >= 9223372036854775807
    UNION ALL SELECT 2, 'QF301', 'fenceq: a claim token was already used; recover the claim instead'
      FROM temp.fenceq_adopt AS a
     WHERE EXISTS (SELECT 1 FROM fenceq__claims AS c WHERE c.claim_token = :claim_token)
    UNION ALL SELECT 3, '22008', 'fenceq: the lease ends after year 9999'
      FROM temp.fenceq_adopt AS a
     WHERE a.lease > 253402300799999999 - a.now
) WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error) ORDER BY rank LIMIT 1;
UPDATE fenceq__jobs
   SET generation = a.generation + 1, owner_id = :owner_id, claim_token = :claim_token, lease = a.lease,
       lease_expires_at = a.now + a.lease, budget_expires_at = NULL, pid = NULL
  FROM temp.fenceq_adopt AS a
 WHERE fenceq__jobs.seq = a.seq AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
-- Storage must keep exactly what was sent: anything that changed it rolls
-- the whole adoption back.
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF302', 'fenceq: storage changed the claim identity'
  FROM temp.fenceq_adopt AS a JOIN fenceq__jobs AS j ON j.seq = a.seq
 WHERE NOT (j.owner_id IS :owner_id AND j.claim_token IS :claim_token AND j.generation IS a.generation + 1)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT INTO fenceq__claims (claim_token, job_id, generation, owner_id, claimed_at)
SELECT :claim_token, :job_id, a.generation + 1, :owner_id, a.now
  FROM temp.fenceq_adopt AS a
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
UPDATE fenceq__dispatches
   SET generation = a.generation + 1
  FROM temp.fenceq_adopt AS a
 WHERE fenceq__dispatches.job_id = :job_id AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{history_event(
    temp.fenceq_adopt AS a JOIN fenceq__jobs AS j ON j.seq = a.seq,
    NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'dispatch_adopted', {{by(a.generation + 1, :owner_id)}},
    json_object('backend', :backend, 'previous_owner_id', a.previous_owner_id, 'ref', :expected_ref),
    a.now)}}
SELECT e.sqlstate, e.message, e.detail,
       {{claim_nulls}}
  FROM temp.fenceq_error AS e
UNION ALL
SELECT NULL, NULL, NULL,
       {{claim_columns}}
  FROM temp.fenceq_adopt AS a JOIN fenceq__jobs AS j ON j.seq = a.seq
 WHERE NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
