-- fenceq for SQLite: version -- the installed schema version.
-- Generated from templates/version.sql by scripts/gen-sqlite: edit the template.
--
-- Parameters: none.
-- Result: one row (sqlstate, message, detail, value TEXT), read from
-- PRAGMA user_version, which the migration sets.
-- How to run: inside a deferred BEGIN (it only reads), as README.md describes.
SELECT NULL AS sqlstate, NULL AS message, NULL AS detail, CAST(user_version AS TEXT) AS value
  FROM pragma_user_version;
