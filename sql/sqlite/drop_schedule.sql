-- fenceq for SQLite: drop_schedule -- delete a schedule; the jobs it submitted stay.
-- Generated from templates/drop_schedule.sql by scripts/gen-sqlite: edit the template.
--
-- True when the schedule existed.
--
-- Parameters: :schedule TEXT (1 to 218 characters).
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
CREATE TEMP TABLE IF NOT EXISTS fenceq_error (
    sqlstate TEXT NOT NULL, message TEXT NOT NULL, detail TEXT);
DELETE FROM temp.fenceq_error;
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF102', 'fenceq: schedule must be 1 to 218 characters'
 WHERE NOT (typeof(:schedule) = 'text' AND length(:schedule) BETWEEN 1 AND 218
            AND instr(CAST(:schedule AS BLOB), x'00') = 0);
DELETE FROM fenceq__schedules
 WHERE schedule = :schedule AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
SELECT e.sqlstate, e.message, e.detail,
       CASE WHEN e.sqlstate IS NULL THEN changes() > 0 END AS value
  FROM (SELECT 1) LEFT JOIN temp.fenceq_error AS e;
