// A Node.js application's side of TestSidecarNodeTask: it follows its task
// through the sidecar's local API with the slicerd-task library
// (clients/node) and prints what it sees, one JSON object a line, for the
// Go test to check against a Clerk (the same steps as pytask.py).
import { Task, LocalAPIError } from '../../clients/node/index.js';

const KEYS = Array.from({ length: 2000 }, (_, i) => `key-${i}`);
const emit = (o) => process.stdout.write(JSON.stringify(o, (_, v) => (typeof v === 'bigint' ? Number(v) : v)) + '\n');
const deadline = (p, what) => Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out waiting for ${what}`)), 30000).unref())]);

const task = new Task(process.argv[2]).start();
let r = await deadline(task.until((x) => x.ranges.length > 0), 'ranges');
emit({ step: 'held', generation: r.generation, owned: KEYS.flatMap((k, i) => (task.owns(k) ? [i] : [])) });
const t0 = process.hrtime.bigint();
let n = 0;
while (process.hrtime.bigint() - t0 < 500_000_000n) { for (const k of KEYS) task.owns(k); n += KEYS.length; }
emit({ step: 'lookup', ns_per_owns: Number(process.hrtime.bigint() - t0) / n });
await task.setDraining(true);
r = await deadline(task.until((x) => x.ranges.length === 0), 'every range lost');
emit({ step: 'drained', generation: r.generation });
await task.setDraining(false);
r = await deadline(task.until((x) => x.ranges.length > 0), 'ranges again');
emit({ step: 'back', generation: r.generation, owned: KEYS.flatMap((k, i) => (task.owns(k) ? [i] : [])) });
{
  const owned = [], tokens = new Set();
  let kept = 0;
  for (const [i, k] of KEYS.slice(0, 50).entries()) {
    const h = await task.acquire(k);
    if (h.owned) { owned.push(i); tokens.add(h.token); }
    if (await h.release()) kept++;
  }
  emit({ step: 'handles', generation: task.ranges().generation, owned, tokens: [...tokens].sort(), continuous: kept });
}
await task.reportLoad([['key-1', 1], [Buffer.from('key-2'), 2]]);
try {
  await task.reportLoad([['key-1', -1]]);
  emit({ step: 'bad-load', code: 'accepted' });
} catch (e) {
  emit({ step: 'bad-load', code: e instanceof LocalAPIError ? e.code : String(e) });
}
task.close();
