// One Task of slicerd-task following its ranges while the sidecar's
// WatchRanges streams are all taken: counts the WatchRanges requests the
// library makes (http.request, which it calls, is wrapped to count them),
// prints the count after 600 ms, then again with the generation heard on
// each line of input, and closes at the end of its input.
import http from 'node:http';
import readline from 'node:readline';

let watches = 0;
const request = http.request;
http.request = (opts, ...rest) => {
  if (String(opts.path).endsWith('/WatchRanges')) watches++;
  return request(opts, ...rest);
};
const { Task } = await import('../../clients/node/index.js');
const task = new Task(process.argv[2]).start();
await new Promise((r) => setTimeout(r, 600));
const report = () => JSON.stringify({ watches, error: String(task.error), generation: String(task.ranges().generation) }) + '\n';
process.stdout.write(report());
for await (const _ of readline.createInterface({ input: process.stdin })) {
  process.stdout.write(report());
}
task.close();
process.exit(0);
