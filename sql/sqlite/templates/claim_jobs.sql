-- fenceq for SQLite: claim_jobs -- claim up to max_jobs jobs under one nonce.
--
-- The next eligible jobs (pending, due, not expired, queue not paused)
-- across the queues, in priority desc, run_at, submission order, as
-- claim_batch picks them, at most max_jobs. Every job of the call gets the
-- fence (job_id, owner_id, generation, claim_nonce): its claim_token is the
-- nonce. The call spends the nonce once: one ledger row (claim_token = the
-- nonce, the jobs in claim order in job_ids), and each job's claim is
-- appended to its call_claims. A nonce already spent, by claim_jobs or as
-- a claim_next, claim_batch or adopt_dispatch token (one namespace), raises
-- QF301 before anything is claimed, also when there is nothing to claim.
-- Nothing eligible: no rows, nothing recorded, the nonce not spent. An
-- empty queue array QF100, an undeclared queue QF101, max_jobs outside 1 to
-- 10000 QF104. NULL lease takes the queue's; with a budget,
-- lease_expires_at = min(now + lease, now + budget).
--
-- Parameters: :queues JSON array of TEXT; :owner_id TEXT; :claim_nonce
-- TEXT; :max_jobs INTEGER; :lease, :budget INTEGER microseconds or NULL.
-- Result: zero or more rows (sqlstate, message, detail, then the claim
-- columns as claim_batch returns them), or one error row.
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
--
-- Differs from PostgreSQL in that there is no SKIP LOCKED, as in
-- claim_batch: concurrent claimers take turns on the write lock, so of two
-- calls with one nonce the second finds it spent (QF301) before it claims
-- anything (PostgreSQL: the second fails on the ledger's key and rolls its
-- claims back). The call's jobs (job_ids) and each job's claims by
-- claim_jobs (call_claims, claimed_at in INTEGER microseconds) are JSON
-- arrays. A claim time beyond year 9999 raises 22008 (PostgreSQL:
-- timestamp out of range).
{{error_table}}
{{claim_scratch}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT sqlstate, message FROM (
    {{claim_caller_checks}}
    UNION ALL SELECT 4, 'QF102', 'fenceq: claim_nonce must be 1 to 255 characters'
     WHERE NOT {{identifier(:claim_nonce, 255)}}
    UNION ALL SELECT 5, 'QF104', 'fenceq: max_jobs must be an integer from 1 to 10000'
     WHERE NOT (typeof(:max_jobs) = 'integer' AND :max_jobs BETWEEN 1 AND 10000)
    {{claim_lease_checks}}
    UNION ALL SELECT 8, 'QF301', 'fenceq: a claim token was already used; recover the claim instead'
     WHERE EXISTS (SELECT 1 FROM fenceq__claims AS c WHERE c.claim_token = :claim_nonce)
    {{unknown_queue_check}}
) ORDER BY rank LIMIT 1;
-- Each active queue's first max_jobs heads through the claim index, merged
-- in claim order, the first max_jobs of them taken under the nonce.
WITH clock(now) AS MATERIALIZED (
        SELECT c.now FROM temp.fenceq_claim_clock AS c),
     heads AS (
        {{queue_heads({{max_jobs}}, {{as_json_array(:queues)}})}})
INSERT INTO temp.fenceq_claim (ord, seq, token, generation, lease, history, now)
SELECT c.ord, c.seq, :claim_nonce, c.generation, coalesce(:lease, c.queue_lease), c.history, clock.now
  FROM (SELECT row_number() OVER (ORDER BY h.priority DESC, h.run_at, h.seq) AS ord, h.*
          FROM heads AS h) AS c
  JOIN clock
 WHERE c.ord <= {{max_jobs}} AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{claim_writes({{call_claimed_by}})}}
-- The call's one ledger row, when it claimed anything: the nonce is spent.
INSERT INTO fenceq__claims (claim_token, owner_id, claimed_at, job_ids)
SELECT :claim_nonce, :owner_id, a.now, a.job_ids
  FROM (SELECT count(*) AS n, max(c.now) AS now, json_group_array(c.job_id) AS job_ids
          FROM (SELECT c.now, j.job_id
                  FROM temp.fenceq_claim AS c JOIN fenceq__jobs AS j ON j.seq = c.seq
                 ORDER BY c.ord) AS c) AS a
 WHERE a.n > 0 AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{claims_recorded_and_answered}}
