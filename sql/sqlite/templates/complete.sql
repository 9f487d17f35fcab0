-- fenceq for SQLite: complete -- record success for a live claim.
--
-- True once; false for a stale, expired, terminal or cancel-requested
-- fence. QF106 for a malformed fence, QF103 for a bad result. A dispatch
-- the claim had ends with it. Events completed, and unblocked for each
-- dependent it frees.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :result canonical JSON
-- TEXT or NULL.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- The write is guarded by the checks (all of them functions of the
-- parameters); a scratch row per connection (temp.fenceq_complete_call)
-- keeps changes() of the write for the answer, which repeats the checks.
-- Between them the job's dependents are counted off (no statement of
-- theirs writes a row for a job without dependents).
CREATE TEMP TABLE IF NOT EXISTS fenceq_complete_call (
    id INTEGER PRIMARY KEY CHECK (id = 1), changed INTEGER NOT NULL);
-- The decision and the write: the clock is read once, inside this
-- statement, after BEGIN IMMEDIATE took the write lock.
UPDATE fenceq__jobs
   SET status = 'completed', result = nullif(:result, 'null'),
       finished_at = {{now}}
 WHERE job_id = :job_id
   AND {{holds_fence(fenceq__jobs, :owner_id, :generation, :claim_token, {{now}})}}
   AND NOT cancel_requested
   AND {{well_formed_fence}}
   AND {{optional_json(:result)}}
   AND {{optional_within_1_mib(:result)}};
INSERT OR REPLACE INTO temp.fenceq_complete_call (id, changed) VALUES (1, changes());
{{release_dependents(:job_id, 1)}}
{{completed_events(SELECT :job_id FROM temp.fenceq_complete_call AS c WHERE c.changed > 0)}}
-- The answer: the first failing check (in this order), else whether the
-- write above happened.
SELECT substr(e.error, 1, 5) AS sqlstate, substr(e.error, 7) AS message, NULL AS detail,
       CASE WHEN e.error IS NULL
            THEN (SELECT c.changed > 0 FROM temp.fenceq_complete_call AS c) END AS value
  FROM (SELECT CASE
        WHEN NOT {{well_formed_fence}}
             THEN 'QF106 fenceq: the fence is malformed'
        WHEN NOT {{optional_json(:result)}}
             THEN 'QF103 fenceq: result must be finite JSON without \u0000'
        WHEN NOT {{optional_within_1_mib(:result)}}
             THEN 'QF103 fenceq: result exceeds 1 MiB in canonical form'
        END AS error) AS e;
