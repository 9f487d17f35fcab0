-- fenceq migration 0008: version 7 -> 8, for SQLite. Frozen at release.
--
-- Why: see 0008_fenceq_v8.py. One nonce per claim call (claim_jobs): the
-- claim ledger takes a row per call besides its rows per token, so its
-- job_id and generation become nullable and it gains job_ids; a job keeps
-- the claims claim_jobs made of it in call_claims. SQLite cannot drop NOT
-- NULL in place: fenceq__claims is rebuilt (every row kept, its index
-- made again), the view over it dropped first and made again after.

-- The view reads the table: a rename would point it at the old one.
DROP VIEW fenceq_attempts;
DROP INDEX fenceq__claims_job_idx;
ALTER TABLE fenceq__claims RENAME TO fenceq__claims_v7;
-- The claim ledger (version 8, schema.sql): a per-token row names its job
-- and generation; a claim_jobs call's row names neither and lists the
-- call's jobs in claim order (job_ids, a JSON array). The primary key makes
-- tokens and nonces one namespace.
CREATE TABLE fenceq__claims (
    claim_token TEXT NOT NULL PRIMARY KEY,
    job_id      TEXT,
    generation  INTEGER,
    owner_id    TEXT NOT NULL,
    claimed_at  INTEGER NOT NULL,
    job_ids     TEXT,
    CHECK ((job_id IS NULL) = (job_ids IS NOT NULL) AND (job_id IS NULL) = (generation IS NULL))
) STRICT;
INSERT INTO fenceq__claims (claim_token, job_id, generation, owner_id, claimed_at)
SELECT claim_token, job_id, generation, owner_id, claimed_at FROM fenceq__claims_v7 ORDER BY rowid;
DROP TABLE fenceq__claims_v7;
CREATE INDEX fenceq__claims_job_idx ON fenceq__claims (job_id, generation);

-- Each claim of the job by claim_jobs, oldest first: a JSON array of
-- {"generation", "owner_id", "claimed_at" (INTEGER microseconds),
-- "claim_nonce"}; NULL until its first such claim. Catalog-only.
ALTER TABLE fenceq__jobs ADD COLUMN call_claims TEXT;

-- One row per successful claim of a job: per-token rows, then the claims
-- of claim_jobs calls, from the jobs' call_claims.
CREATE VIEW fenceq_attempts AS
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

-- The schema version, read by version.sql.
PRAGMA user_version = 8;
