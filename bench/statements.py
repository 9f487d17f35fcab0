"""The SQL the benchmarks send: fenceq's functions called as any driver would
call them (named parameters, explicit casts), and the bare-SQL baseline they
are compared with.

Plain constants with no imports, so that ``bench/independent.py`` can load
this file on its own and reproduce the figures outside the bench package.
"""

# --- the bare baseline ------------------------------------------------------
#
# A minimal jobs table a team would write by hand: identity key, the claim
# index a bare queue needs to find the next job without scanning history
# (same ordering as fenceq: priority desc, run_at, submission order), and
# nothing else (no fences, no ledger, no idempotency, no validation).
BARE_SCHEMA = """
CREATE TABLE IF NOT EXISTS bare_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text NOT NULL,
    task             text NOT NULL,
    payload          jsonb,
    priority         integer NOT NULL DEFAULT 0,
    status           text NOT NULL DEFAULT 'pending',
    run_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    owner_id         text,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at      timestamptz
);
CREATE INDEX IF NOT EXISTS bare_jobs_claim_idx ON bare_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'pending';
"""

BARE_INSERT = ("INSERT INTO bare_jobs (queue, task, payload) "
               "VALUES (%(queue)s, %(task)s, %(payload)s::jsonb) RETURNING id")

# The same JSON array submit_batch takes, so both parse the same input.
BARE_INSERT_BATCH = """
WITH ins AS (
    INSERT INTO bare_jobs (queue, task, payload)
    SELECT %(queue)s, r.value ->> 'task', r.value -> 'payload'
      FROM jsonb_array_elements(%(requests)s::jsonb) AS r
    RETURNING id)
SELECT count(*) FROM ins
"""

BARE_CLAIM = """
UPDATE bare_jobs
   SET status = 'claimed', owner_id = %(owner)s,
       lease_expires_at = clock_timestamp() + interval '30 seconds'
 WHERE id = (SELECT id FROM bare_jobs
              WHERE queue = %(queue)s AND status = 'pending' AND run_at <= clock_timestamp()
              ORDER BY priority DESC, run_at, id
              FOR UPDATE SKIP LOCKED
              LIMIT 1)
RETURNING id, task, payload
"""

BARE_COMPLETE = """
UPDATE bare_jobs SET status = 'completed', finished_at = clock_timestamp()
 WHERE id = %(id)s AND owner_id = %(owner)s AND status = 'claimed'
"""

BARE_CLAIM_BATCH = """
WITH picked AS (
    SELECT id FROM bare_jobs
     WHERE queue = %(queue)s AND status = 'pending' AND run_at <= clock_timestamp()
     ORDER BY priority DESC, run_at, id
     FOR UPDATE SKIP LOCKED
     LIMIT %(n)s)
UPDATE bare_jobs AS b
   SET status = 'claimed', owner_id = %(owner)s,
       lease_expires_at = clock_timestamp() + interval '30 seconds'
  FROM picked WHERE b.id = picked.id
RETURNING b.id, b.task, b.payload
"""

BARE_COMPLETE_BATCH = """
UPDATE bare_jobs SET status = 'completed', finished_at = clock_timestamp()
 WHERE id = ANY (%(ids)s::bigint[]) AND owner_id = %(owner)s AND status = 'claimed'
"""

BARE_CLEAR_FINISHED = "DELETE FROM bare_jobs WHERE status <> 'pending'"

# --- fenceq -----------------------------------------------------------------

FQ_SUBMIT = ("SELECT fenceq.submit(queue => %(queue)s::text, task => %(task)s::text, "
             "payload => %(payload)s::jsonb)")

FQ_SUBMIT_OWNED = ("SELECT fenceq.submit(queue => %(queue)s::text, task => %(task)s::text, "
                   "payload => %(payload)s::jsonb, submission_id => %(submission_id)s::text)")

FQ_SUBMIT_BATCH = ("SELECT cardinality(fenceq.submit_batch(queue => %(queue)s::text, "
                   "requests => %(requests)s::jsonb))")

FQ_CLAIM_NEXT = ("SELECT * FROM fenceq.claim_next(queues => %(queues)s::text[], "
                 "owner_id => %(owner)s::text, claim_token => %(token)s::text)")

FQ_COMPLETE = ("SELECT fenceq.complete(job_id => %(job_id)s::text, owner_id => %(owner)s::text, "
               "generation => %(generation)s::bigint, claim_token => %(token)s::text)")

FQ_CLAIM_BATCH = ("SELECT * FROM fenceq.claim_batch(queues => %(queues)s::text[], "
                  "owner_id => %(owner)s::text, claim_tokens => %(tokens)s::text[])")

# Version 8: one nonce for the whole call.
FQ_CLAIM_JOBS = ("SELECT * FROM fenceq.claim_jobs(queues => %(queues)s::text[], "
                 "owner_id => %(owner)s::text, claim_nonce => %(nonce)s::text, max_jobs => %(n)s::integer)")

FQ_COMPLETE_BATCH = ("SELECT fenceq.complete_batch(job_ids => %(job_ids)s::text[], "
                     "owner_ids => %(owners)s::text[], generations => %(generations)s::bigint[], "
                     "claim_tokens => %(tokens)s::text[])")

# Removes finished jobs (and their ledger rows) through the public API.
FQ_PURGE = "SELECT fenceq.purge(older_than => interval '0', max_rows => 100000)"

FQ_CREATE_QUEUE = "SELECT fenceq.create_queue(queue => %(queue)s::text)"
