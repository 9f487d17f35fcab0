// graphile-worker (0.18) for bench/peers.py, configured as its docs'
// performance page recommends for throughput: a local queue of 500 jobs
// per process (fetched and locked in batches), completions batched
// (completeJobBatchDelay 0), concurrency 16.
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";
import { CONCURRENCY, FILL_CHUNK, TASK, main, serve } from "./protocol.mjs";

const preset = {
  worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 },
};
// Warnings and errors to stderr: stdout carries the protocol.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
});
const quiet = { logger };

await main({
  async setup(url) {
    await runMigrations({ connectionString: url, ...quiet });
  },
  async fill(url, jobs) {
    const utils = await makeWorkerUtils({ connectionString: url, ...quiet });
    for (let start = 0; start < jobs; start += FILL_CHUNK) {
      const size = Math.min(FILL_CHUNK, jobs - start);
      await utils.addJobs(Array.from({ length: size }, (_, i) => ({ identifier: TASK, payload: { n: start + i } })));
    }
    await utils.release();
  },
  async work(url) {
    let handled = 0;
    let runner;
    await serve(
      async () => {
        runner = await run({
          connectionString: url,
          concurrency: CONCURRENCY,
          noHandleSignals: true,
          preset,
          taskList: { [TASK]: async () => { handled += 1; } },
          ...quiet,
        });
      },
      async () => { await runner.stop(); },
      () => handled,
    );
  },
});
