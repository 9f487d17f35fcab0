// fenceq from Node: the whole protocol, calling the PostgreSQL functions
// directly with the `pg` driver and named parameters. No fenceq client
// library is involved; see README.md in this folder.
//
//   FENCEQ_DATABASE_URL=postgresql://app@db/app node example.js
//
// The database must have fenceq installed (`fenceq migrate` or the script
// from `fenceq sql`), and the role must be allowed to create a queue (the
// example declares its own). Exit status: 0 when every step answered as
// expected, 1 otherwise.

'use strict';

const crypto = require('node:crypto');
const { Client } = require('pg');

// --- Errors: switch on the SQLSTATE, never on the message ----------------

// What a caller should do about an error, from its SQLSTATE (err.code).
// docs/guarantees.md §6: QF1xx / class 22 / 42501 / 42883 are bugs or configuration,
// QF2xx conflicts of a submission, QF3xx conflicts of a claim. Anything
// else (a lost connection, 40001, 40P01, 57P01, ...) leaves the outcome
// unknown: retry the same submission (same submission_id), or ask
// recover_claim with the same token. Never treat it as "did not happen".
function classify(err) {
  const code = typeof err.code === 'string' ? err.code : '';
  if (/^QF1\d\d$/.test(code) || code === 'QF901' || code.startsWith('22')
      || code === '42501' || code === '42883') {
    return 'config';
  }
  if (/^QF2\d\d$/.test(code)) return 'submission_conflict';
  if (/^QF3\d\d$/.test(code)) return 'claim_conflict';
  return 'unavailable';
}

// --- A tiny log that fails loudly ------------------------------------------

let failures = 0;

function ok(step, detail) {
  console.log(`ok    ${step}: ${detail}`);
}

function bad(step, detail) {
  failures += 1;
  console.log(`FAIL  ${step}: ${detail}`);
}

function expect(step, condition, detail, otherwise) {
  if (condition) ok(step, detail);
  else bad(step, otherwise === undefined ? `unexpected: ${detail}` : otherwise);
}

// Run a call that must fail with one SQLSTATE.
async function expectError(step, sqlstate, call) {
  try {
    await call();
  } catch (err) {
    if (err.code === sqlstate) {
      ok(step, `refused with ${err.code} (${classify(err)})`);
      return;
    }
    bad(step, `expected ${sqlstate}, got ${err.code || 'no code'} (${classify(err)})`);
    return;
  }
  bad(step, `expected ${sqlstate}, but the call succeeded`);
}

// --- The fence: every write after a claim carries all four parts ----------

// generation is a PostgreSQL bigint: pg returns it as a string, and we send
// it back as that string, so no precision is ever lost in a JS number.
function fenceOf(claim) {
  return {
    job_id: claim.job_id,
    owner_id: claim.owner_id,
    generation: claim.generation,
    claim_token: claim.claim_token,
  };
}

const FENCE_SQL = 'job_id => $1, owner_id => $2, generation => $3, claim_token => $4';

function fenceParams(fence) {
  return [fence.job_id, fence.owner_id, fence.generation, fence.claim_token];
}

// --- fenceq calls, one SQL statement each, always with bound parameters --

// jsonb parameters travel as JSON text; JS null/undefined as SQL NULL.
function toJsonb(value) {
  return value === null || value === undefined ? null : JSON.stringify(value);
}

async function createQueue(db, queue) {
  const { rows } = await db.query(
    "SELECT fenceq.create_queue(queue => $1, lease => $2, max_attempts => $3) AS created",
    [queue, '30 seconds', 3]);
  return rows[0].created;
}

async function submit(db, queue, task, payload, submissionId) {
  const { rows } = await db.query(
    'SELECT fenceq.submit(queue => $1, task => $2, payload => $3, submission_id => $4) AS job_id',
    [queue, task, toJsonb(payload), submissionId]);
  return rows[0].job_id;
}

// A claim token is a fresh nonce the caller keeps *before* sending the claim.
function newClaimToken() {
  return crypto.randomBytes(16).toString('hex');
}

async function claimNext(db, queues, ownerId, claimToken) {
  const { rows } = await db.query(
    'SELECT * FROM fenceq.claim_next(queues => $1, owner_id => $2, claim_token => $3)',
    [queues, ownerId, claimToken]);
  return rows[0] || null;  // zero rows: nothing eligible right now
}

async function recoverClaim(db, ownerId, claimToken) {
  const { rows } = await db.query(
    'SELECT * FROM fenceq.recover_claim(owner_id => $1, claim_token => $2)',
    [ownerId, claimToken]);
  return rows[0] || null;  // zero rows: no live claim for this owner and token
}

async function heartbeat(db, fence, lease) {
  const { rows } = await db.query(
    `SELECT fenceq.heartbeat(${FENCE_SQL}, lease => $5) AS live`,
    [...fenceParams(fence), lease]);
  return rows[0].live;
}

async function complete(db, fence, result) {
  const { rows } = await db.query(
    `SELECT fenceq.complete(${FENCE_SQL}, result => $5) AS applied`,
    [...fenceParams(fence), toJsonb(result)]);
  return rows[0].applied;
}

// Claim with recovery: if the answer to claim_next is lost (the connection
// drops, a timeout fires), the claim may or may not have happened. Do not
// claim again with a new token: ask for the claim this token made.
async function claimWithRecovery(db, queues, ownerId, claimToken, reconnect) {
  try {
    return await claimNext(db, queues, ownerId, claimToken);
  } catch (err) {
    if (classify(err) !== 'unavailable') throw err;
    const fresh = await reconnect();
    return recoverClaim(fresh, ownerId, claimToken);
  }
}

// --- The tour ----------------------------------------------------------------

async function main() {
  const url = process.env.FENCEQ_DATABASE_URL;
  if (!url || !url.startsWith('postgres')) {
    console.error('set FENCEQ_DATABASE_URL to a postgresql:// URL of a database with fenceq installed');
    return 2;
  }
  const db = new Client({ connectionString: url, application_name: 'fenceq-node-example' });
  await db.connect();
  try {
    // pg runs each query in its own implicit transaction (autocommit), which
    // is what fenceq expects: every call commits on its own.
    const { rows: [{ version }] } = await db.query('SELECT fenceq.version() AS version');
    ok('version', `fenceq schema version ${version}`);

    // A queue per run, so running the example again on the same database
    // never picks up an earlier run's jobs.
    const run = crypto.randomBytes(4).toString('hex');
    const queue = `node-example-${run}`;
    const owner = `node-worker-${process.pid}-${run}`;
    expect('create_queue', await createQueue(db, queue) === true, `created ${queue}`);
    expect('create_queue again', await createQueue(db, queue) === false,
      'false: exists with the same settings');

    // Producer: a submission id (kept by the caller) makes the retry safe.
    const submissionId = `signup-${run}`;
    const payload = { to: 'ada@example.com', template: 'welcome' };
    const jobId = await submit(db, queue, 'send_welcome', payload, submissionId);
    ok('submit', `job ${jobId}`);
    const replayed = await submit(db, queue, 'send_welcome', payload, submissionId);
    expect('submit replay', replayed === jobId, 'same job id returned',
      `replay returned ${replayed}, expected ${jobId}`);
    await expectError('submit changed request under the same submission id', 'QF201',
      () => submit(db, queue, 'send_welcome', { ...payload, to: 'bob@example.com' }, submissionId));

    // Worker: pick the nonce first, keep it, then claim.
    const token = newClaimToken();
    const claim = await claimNext(db, [queue], owner, token);
    if (!claim) {
      bad('claim_next', 'no job claimed');
      return 1;
    }
    expect('claim_next', claim.job_id === jobId && claim.generation === '1',
      `job ${claim.job_id}, generation ${claim.generation}, attempt ${claim.attempt} of ${claim.max_attempts}`);
    expect('claim payload', claim.payload && claim.payload.to === payload.to,
      `payload ${JSON.stringify(claim.payload)}`);
    const fence = fenceOf(claim);

    expect('heartbeat', await heartbeat(db, fence, '60 seconds') === true, 'true: lease renewed');
    expect('complete', await complete(db, fence, { message_id: 'm-1' }) === true, 'true: job completed');
    expect('complete again', await complete(db, fence, { message_id: 'm-2' }) === false,
      'false: the claim is no longer live, nothing changed');
    expect('heartbeat after complete', await heartbeat(db, fence, null) === false,
      'false: a finished claim cannot be renewed');

    // A used nonce can never claim again, whatever the owner.
    const second = await submit(db, queue, 'send_welcome', { to: 'eve@example.com' }, `signup-2-${run}`);
    ok('submit', `second job ${second}`);
    await expectError('claim_next reusing a claim token', 'QF301',
      () => claimNext(db, [queue], owner, token));

    // Recovery: claim, pretend the answer was lost, recover by nonce.
    const token2 = newClaimToken();
    await claimNext(db, [queue], owner, token2);  // the answer is "lost": ignored
    ok('claim_next', 'answer lost (pretend): the job may or may not be ours');
    const recovered = await recoverClaim(db, owner, token2);
    if (!recovered) {
      bad('recover_claim', 'no live claim for this owner and token');
      return 1;
    }
    expect('recover_claim', recovered.job_id === second && recovered.generation === '1',
      `same fence: job ${recovered.job_id}, generation ${recovered.generation}`);
    expect('recover_claim by another owner', await recoverClaim(db, `${owner}-other`, token2) === null,
      'no row: the nonce only answers its own owner');
    expect('complete recovered', await complete(db, fenceOf(recovered), { message_id: 'm-3' }) === true,
      'true: job completed with the recovered fence');
    expect('recover_claim after complete', await recoverClaim(db, owner, token2) === null,
      'no row: the claim is no longer live');

    // The same helper a real worker would use (here the claim just succeeds).
    const third = await submit(db, queue, 'send_welcome', { to: 'mallory@example.com' }, null);
    // (A real worker's reconnect opens a new connection; this one never runs.)
    const claimed = await claimWithRecovery(db, [queue], owner, newClaimToken(), async () => db);
    expect('claim with recovery', claimed !== null && claimed.job_id === third, `job ${third} claimed`);
    expect('complete', await complete(db, fenceOf(claimed), null) === true, 'true: job completed');

    // Errors by code: an undeclared queue is QF101, a configuration error.
    await expectError('submit to an undeclared queue', 'QF101',
      () => submit(db, `${queue}-missing`, 'send_welcome', {}, null));

    const { rows: stats } = await db.query(
      'SELECT pending, claimed FROM fenceq.queue_stats WHERE queue = $1', [queue]);
    expect('queue_stats', stats.length === 1 && stats[0].pending === '0' && stats[0].claimed === '0',
      'nothing pending or claimed');
  } finally {
    await db.end();
  }
  if (failures > 0) {
    console.log(`${failures} step(s) did not answer as expected`);
    return 1;
  }
  console.log('done: every step answered as expected');
  return 0;
}

main().then(
  (status) => { process.exitCode = status; },
  (err) => {
    // An error nobody expected: print its SQLSTATE and class, not its text
    // (fenceq messages never echo values, but driver messages may).
    console.log(`FAIL  unexpected error: ${err.code || err.name} (${classify(err)})`);
    if (err.code === '3F000' || err.code === '42883') {
      console.log('      is fenceq installed in this database? run `fenceq migrate`');
    }
    process.exitCode = 1;
  });
