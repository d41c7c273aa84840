// The Node.js side of follow_ranges.py: the same, with slicerd-task.
import readline from 'node:readline';
import { Task, sliceKey } from '../../clients/node/index.js';

const KEYS = Array.from({ length: 2000 }, (_, i) => `key-${i}`);
const HS = KEYS.map((k) => sliceKey(k));
const held = KEYS.map(() => false);
const task = new Task(process.argv[2], {
  onChange: (gen, gained, lost) => {
    HS.forEach((h, i) => {
      if (lost.some(([s, e]) => s <= h && h < e)) held[i] = false;
      if (gained.some(([s, e]) => s <= h && h < e)) held[i] = true;
    });
  },
}).start();
for await (const _ of readline.createInterface({ input: process.stdin })) {
  const onChange = held.flatMap((b, i) => (b ? [i] : []));
  const owns = KEYS.flatMap((k, i) => (task.owns(k) ? [i] : []));
  process.stdout.write(JSON.stringify({ generation: Number(task.ranges().generation), on_change: onChange, owns }) + '\n');
}
task.close();
