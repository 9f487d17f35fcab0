// The child protocol of bench/peers.py (as bench/peers_child.py speaks it):
//   node graphile.mjs|pgboss.mjs setup|fill|work URL [JOBS]
// work: print {"ready":true}, wait for "go" on stdin, work until "stop",
// stop gracefully, print {"handled":N}.
import { createInterface } from "node:readline";

export const QUEUE = "bench_peers";
export const TASK = "bench";
export const CONCURRENCY = 16; // jobs in flight per process
export const FILL_CHUNK = 1000;

export function say(fields) {
  process.stdout.write(JSON.stringify(fields) + "\n");
}

export async function serve(start, stop, handled) {
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const next = async () => {
    const { value, done } = await lines.next();
    return done ? "" : value.trim();
  };
  say({ ready: true });
  if ((await next()) !== "go") return;
  const running = start();
  await next(); // "stop", or the end of input
  await running;
  await stop();
  say({ handled: handled() });
}

export async function main(commands) {
  const [command, url, jobs] = process.argv.slice(2);
  if (!commands[command] || !url) {
    console.error(`usage: ${process.argv[1]} ${Object.keys(commands).join("|")} URL [JOBS]`);
    process.exit(2);
  }
  await commands[command](url, Number(jobs || 0));
  process.exit(0); // pools with idle timers must not keep the process alive
}
