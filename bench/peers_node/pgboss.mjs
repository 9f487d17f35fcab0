// pg-boss (12.x) for bench/peers.py: one worker per process fetching
// batches of 16 (16 jobs in flight), fetching again at once while the
// batches come back full (burstWhenBatchFull; otherwise pg-boss waits its
// polling interval, at least 0.5 s, between fetches).
import { PgBoss } from "pg-boss";
import { FILL_CHUNK, QUEUE, main, serve } from "./protocol.mjs";

const BATCH = 16;

await main({
  async setup(url) {
    const boss = new PgBoss({ connectionString: url, supervise: false, schedule: false });
    await boss.start();
    await boss.createQueue(QUEUE);
    await boss.stop({ graceful: false });
  },
  async fill(url, jobs) {
    const boss = new PgBoss({ connectionString: url, supervise: false, schedule: false });
    await boss.start();
    for (let start = 0; start < jobs; start += FILL_CHUNK) {
      const size = Math.min(FILL_CHUNK, jobs - start);
      await boss.insert(QUEUE, Array.from({ length: size }, (_, i) => ({ data: { n: start + i } })));
    }
    await boss.stop({ graceful: false });
  },
  async work(url) {
    let handled = 0;
    const boss = new PgBoss({ connectionString: url });
    boss.on("error", (error) => console.error(error));
    await serve(
      async () => {
        await boss.start();
        await boss.work(QUEUE, { batchSize: BATCH, burstWhenBatchFull: true }, async (jobs) => {
          handled += jobs.length;
        });
      },
      async () => { await boss.stop({ graceful: true, timeout: 30000 }); },
      () => handled,
    );
  },
});
