-- fenceq for SQLite: version -- the installed schema version.
--
-- Parameters: none.
-- Result: one row (sqlstate, message, detail, value TEXT), read from
-- PRAGMA user_version, which the migration sets.
--
-- How to run: inside a deferred BEGIN (it only reads). Split the file into statements at each ';'
-- that ends a line, and run them in order, binding every :name
-- parameter (NULL when omitted). The last statement's rows are the
-- answer: one row whose first column sqlstate is not NULL means the call
-- failed (ROLLBACK, then raise that code with message and detail);
-- otherwise sqlstate is NULL and the remaining columns are the result.
-- COMMIT when it succeeded. See README.md for the types.
SELECT NULL AS sqlstate, NULL AS message, NULL AS detail, CAST(user_version AS TEXT) AS value
  FROM pragma_user_version;
