-- fenceq migration 0008 rolled back: version 8 -> 7, for SQLite. Frozen at release.
--
-- Run by 0008_fenceq_v8.py's rollback once no call row is left in the
-- claim ledger (it refuses, or deletes them when data loss is allowed).
-- Every object comes back with version 7's exact text: the ledger is
-- rebuilt under its own name (a rename would quote it), the column
-- dropped once no view reads it.

DROP VIEW fenceq_attempts;
DROP INDEX fenceq__claims_job_idx;
ALTER TABLE fenceq__claims RENAME TO fenceq__claims_v8;
CREATE TABLE fenceq__claims (
    claim_token TEXT NOT NULL PRIMARY KEY,
    job_id      TEXT NOT NULL,
    generation  INTEGER NOT NULL,
    owner_id    TEXT NOT NULL,
    claimed_at  INTEGER NOT NULL
) STRICT;
INSERT INTO fenceq__claims (claim_token, job_id, generation, owner_id, claimed_at)
SELECT claim_token, job_id, generation, owner_id, claimed_at FROM fenceq__claims_v8 ORDER BY rowid;
DROP TABLE fenceq__claims_v8;
CREATE INDEX fenceq__claims_job_idx ON fenceq__claims (job_id, generation);
ALTER TABLE fenceq__jobs DROP COLUMN call_claims;
CREATE VIEW fenceq_attempts AS
SELECT c.job_id, c.generation, c.owner_id,
       strftime('%Y-%m-%dT%H:%M:%S', c.claimed_at / 1000000 - (c.claimed_at % 1000000 < 0),
                'unixepoch')
       || printf('.%06dZ', (c.claimed_at % 1000000 + 1000000) % 1000000) AS claimed_at
  FROM fenceq__claims AS c;
PRAGMA user_version = 7;
