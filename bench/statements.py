"""The SQL the benchmark sends: fenceq's functions called directly, and the
bare-SQL baseline they are compared with.

fenceq calls use named parameters and explicit casts, as any driver would.
psycopg prepares each statement server-side after a few executions, for
both systems alike.
"""

from __future__ import annotations

# --- the bare baseline ------------------------------------------------------
#
# A minimal jobs table a team would write by hand: identity key, the claim
# index a bare queue needs to find the next job without scanning history
# (same ordering as fenceq: priority desc, run_at, submission order), and
# nothing else (no fences, no ledger, no idempotency, no validation).
BARE_SCHEMA = """
CREATE TABLE bare_jobs (
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
CREATE INDEX bare_jobs_claim_idx ON bare_jobs (queue, priority DESC, run_at, id)
    WHERE status = 'pending';
"""

BARE_INSERT = ("INSERT INTO bare_jobs (queue, task, payload) VALUES (%s, %s, %s::jsonb) "
               "RETURNING id")

# The same JSON array submit_batch takes, so both parse the same input.
BARE_INSERT_BATCH = """
WITH ins AS (
    INSERT INTO bare_jobs (queue, task, payload)
    SELECT %(queue)s, r.value ->> 'task', r.value -> 'payload'
      FROM jsonb_array_elements(%(requests)s::jsonb) AS r
    RETURNING id)
SELECT array_agg(id) FROM ins
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

# Multi-queue bare claim written the way that keeps one ordered index scan
# per queue (the naive `queue = ANY(...)` form sorts the backlog: see below).
BARE_CLAIM_MULTI = """
UPDATE bare_jobs
   SET status = 'claimed', owner_id = %(owner)s,
       lease_expires_at = clock_timestamp() + interval '30 seconds'
 WHERE id = (SELECT c.id
               FROM unnest(%(queues)s::text[]) AS q(name)
              CROSS JOIN LATERAL (
                    SELECT b.id, b.priority, b.run_at FROM bare_jobs AS b
                     WHERE b.queue = q.name AND b.status = 'pending'
                       AND b.run_at <= clock_timestamp()
                     ORDER BY b.priority DESC, b.run_at, b.id
                     FOR UPDATE SKIP LOCKED
                     LIMIT 1) AS c
              ORDER BY c.priority DESC, c.run_at, c.id
              LIMIT 1)
RETURNING id, task, payload
"""

# The naive multi-queue form (CONTRACT §11's trap), measured for contrast.
BARE_CLAIM_MULTI_NAIVE = """
UPDATE bare_jobs
   SET status = 'claimed', owner_id = %(owner)s,
       lease_expires_at = clock_timestamp() + interval '30 seconds'
 WHERE id = (SELECT id FROM bare_jobs
              WHERE queue = ANY (%(queues)s::text[]) AND status = 'pending'
                AND run_at <= clock_timestamp()
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

# Bulk fill of the baseline (setup only, never timed).
BARE_FILL = """
INSERT INTO bare_jobs (queue, task, payload, run_at)
SELECT %(queue)s, 'bench', jsonb_build_object('n', g),
       clock_timestamp() - interval '1 hour'
  FROM generate_series(1, %(n)s) AS g
"""

# --- fenceq -----------------------------------------------------------------

FQ_SUBMIT = "SELECT fenceq.submit(queue => %s::text, task => %s::text, payload => %s::jsonb)"

FQ_SUBMIT_OWNED = ("SELECT fenceq.submit(queue => %s::text, task => %s::text, payload => %s::jsonb, "
                   "submission_id => %s::text)")

FQ_SUBMIT_BATCH = "SELECT fenceq.submit_batch(queue => %(queue)s::text, requests => %(requests)s::jsonb)"

FQ_CLAIM_NEXT = ("SELECT job_id, generation, task, payload FROM fenceq.claim_next("
                 "queues => %(queues)s::text[], owner_id => %(owner)s::text, "
                 "claim_token => %(token)s::text)")

FQ_COMPLETE = ("SELECT fenceq.complete(job_id => %(job_id)s::text, owner_id => %(owner)s::text, "
               "generation => %(generation)s::bigint, claim_token => %(token)s::text)")

FQ_CLAIM_BATCH = ("SELECT job_id, generation, claim_token, task, payload FROM fenceq.claim_batch("
                  "queues => %(queues)s::text[], owner_id => %(owner)s::text, "
                  "claim_tokens => %(tokens)s::text[])")

FQ_COMPLETE_BATCH = ("SELECT fenceq.complete_batch(job_ids => %(job_ids)s::text[], "
                     "owner_ids => %(owners)s::text[], generations => %(generations)s::bigint[], "
                     "claim_tokens => %(tokens)s::text[])")

# Bulk fill straight into fenceq's private jobs table (setup of the large
# latency backlogs only, never timed). The rows are what submit would write
# for a job without options: a UUID job id, priority 0, the queue's
# max_attempts, status pending, due (run_at an hour ago).
FQ_FILL_DIRECT = """
INSERT INTO fenceq._jobs (job_id, queue, task, payload, priority, max_attempts, run_at, created_at)
SELECT gen_random_uuid()::text, %(queue)s, 'bench', jsonb_build_object('n', g), 0,
       (SELECT q.max_attempts FROM fenceq._queues AS q WHERE q.queue = %(queue)s),
       clock_timestamp() - interval '1 hour', clock_timestamp()
  FROM generate_series(1, %(n)s) AS g
"""
