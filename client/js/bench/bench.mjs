// acquire+release pairs through ONE client, 64 concurrent callers and 1.
// Env: TICKETING_ADDR (host:port), TICKETING_TOKEN (may be empty), BENCH_SECONDS (default 5).
import { performance } from "node:perf_hooks";

import { Client } from "../dist/esm/index.js";

const addr = process.env.TICKETING_ADDR;
if (!addr) {
  console.error("set TICKETING_ADDR to host:port of a running server");
  process.exit(2);
}
const seconds = Number(process.env.BENCH_SECONDS || "5");
const token = process.env.TICKETING_TOKEN || null;

const client = await Client.connect({ addrs: [addr], token });
try {
  for (const callers of [64, 1]) {
    const end = performance.now() + seconds * 1000;
    const t0 = performance.now();
    const counts = await Promise.all(
      Array.from({ length: callers }, async (_, i) => {
        const key = `bench/js/${i}`;
        let n = 0;
        while (performance.now() < end) {
          const lease = await client.acquire(key, {
            leaseMs: 10000,
            waitMs: 5000,
          });
          await lease.release();
          n++;
        }
        return n;
      }),
    );
    const elapsed = (performance.now() - t0) / 1000;
    const pairs = counts.reduce((a, b) => a + b, 0);
    console.log(
      "BENCH " +
        JSON.stringify({
          lang: "js",
          api: "promise",
          callers,
          pairs,
          seconds: Math.round(elapsed * 1000) / 1000,
          pairs_per_sec: Math.round((pairs / elapsed) * 10) / 10,
        }),
    );
  }
} finally {
  await client.close();
}
