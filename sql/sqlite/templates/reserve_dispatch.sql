-- fenceq for SQLite: reserve_dispatch -- record that a live claim is about to start external work.
--
-- True when the claim now holds a dispatch reservation for backend under
-- reservation_ref (the idempotency key the caller sends to that system),
-- and true again, with nothing written, when its live dispatch already has
-- this backend and ref (reserved or running: a retried call). False for a
-- stale, expired, terminal or cancel-requested fence. QF305 when the
-- claim's live dispatch has another backend or another ref (release_dispatch
-- it first). A row left from an earlier claim of the job is overwritten.
-- QF106 for a malformed fence, then QF102 for a bad backend (1 to 255
-- characters) or ref (1 to 1,024). Event dispatch_reserved when written.
--
-- Parameters: the fence :job_id TEXT (1 to 36 characters), :owner_id TEXT,
-- :generation INTEGER (>= 1), :claim_token TEXT; :backend TEXT;
-- :reservation_ref TEXT.
-- Result: one row (sqlstate, message, detail, value INTEGER 0/1).
-- How to run: inside BEGIN IMMEDIATE (it writes), as README.md describes.
{{error_table}}
{{fence_check}}
{{first_failing(
    {{name_check(backend, 255)}}
    {{name_check(reservation_ref, 1024)}})}}
{{fence_decision}}
{{live_dispatch}}
INSERT INTO temp.fenceq_error (sqlstate, message)
SELECT 'QF305', 'fenceq: the claim already holds a dispatch for another backend or reservation ref'
  FROM temp.fenceq_fence AS f JOIN temp.fenceq_dispatch AS d
 WHERE NOT f.cancel_requested AND NOT (d.backend = :backend AND d.reservation_ref = :reservation_ref)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
INSERT OR REPLACE INTO fenceq__dispatches (job_id, backend, generation, state, reservation_ref, execution_ref,
                                           reserved_at, finalized_at, checked_at)
SELECT :job_id, :backend, :generation, 'reserved', :reservation_ref, NULL, f.now, NULL, NULL
  FROM temp.fenceq_fence AS f
 WHERE f.live AND NOT f.cancel_requested AND NOT EXISTS (SELECT 1 FROM temp.fenceq_dispatch)
   AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error);
{{history_event(
    temp.fenceq_fence AS f JOIN fenceq__jobs AS j ON j.seq = f.seq,
    f.live AND NOT f.cancel_requested AND NOT EXISTS (SELECT 1 FROM temp.fenceq_dispatch)
    AND NOT EXISTS (SELECT 1 FROM temp.fenceq_error),
    'dispatch_reserved', {{by(:generation, :owner_id)}},
    json_object('backend', :backend, 'reservation_ref', :reservation_ref),
    f.now)}}
{{fence_answer(f.live AND NOT f.cancel_requested)}}
