// Tests of slicerd-task that need no sidecar; e2e/sidecarapps_test.go
// runs the library against a real one (TestSidecarNodeTask).
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { sliceKey, Task } from '../index.js';

// api/conformance/hash.json: the slice keys every client must compute
// (docs/client-contract.md); the Go Clerk's tests check the same file.
const vectors = JSON.parse(readFileSync(new URL('../../../api/conformance/hash.json', import.meta.url))).cases
  .map((c) => [Buffer.from(c.key, 'base64'), BigInt(c.slice_key)]);

test('slice keys match the test vectors', () => {
  for (const [key, want] of vectors) assert.equal(sliceKey(key), want, key.toString('hex'));
  assert.equal(sliceKey('user:42'), sliceKey(Buffer.from('user:42')));
});

test('owns follows the applied ranges', () => {
  const t = new Task('/nonexistent');
  assert.equal(t.owns('a'), false);
  const h = sliceKey('a');
  t.apply({ generation: '3', owned: [{ end: String(h) }, { start: String(h), end: String(h + 1n) }] });
  assert.equal(t.owns('a'), true);
  assert.equal(t.ranges().generation, 3n);
  t.apply({ generation: '4', owned: [{ end: String(h) }] });
  assert.equal(t.owns('a'), false);
});

test('a generation that changes none of the ranges is followed without an onChange', () => {
  const calls = [];
  const t = new Task('/nonexistent', { onChange: (g) => calls.push(g) });
  const r = (start, end) => ({ start: String(start), end: String(end) });
  t.apply({ generation: '3', owned: [r(0, 10)] });
  t.apply({ generation: '4', owned: [r(0, 10)] });
  assert.equal(t.ranges().generation, 4n);
  assert.deepEqual(calls, [3n]);
});

test('onChange tells what changed across a reopened stream', () => {
  // The first message of a stream reopened after the sidecar restarted
  // gains every range held and loses none; onChange still tells what
  // changed since the message before.
  const changes = [];
  const t = new Task('/nonexistent', { onChange: (g, gained, lost) => changes.push([g, gained, lost]) });
  const r = (start, end) => ({ start: String(start), end: String(end) });
  t.apply({ generation: '3', owned: [r(0, 10), r(20, 30)], gained: [r(0, 10), r(20, 30)] });
  t.apply({ generation: '5', owned: [r(5, 10), r(40, 50)], gained: [r(5, 10), r(40, 50)] });
  assert.deepEqual(changes.at(-1), [5n, [[40n, 50n]], [[0n, 5n], [20n, 30n]]]);
});

test('onChange gains and losses match the keys counted one by one', () => {
  // Every pair of sorted, non-overlapping lists of up to two ranges over
  // [0, 8): what the second gains and loses against the first.
  const spans = [];
  for (let a = 0; a < 8; a++) for (let b = a + 1; b <= 8; b++) spans.push([a, b]);
  const lists = [[], ...spans.map((s) => [s])];
  for (const s of spans) for (const q of spans) if (s[1] <= q[0]) lists.push([s, q]);
  const keys = (rs) => new Set(rs.flatMap(([s, e]) => Array.from({ length: Number(e) - Number(s) }, (_, i) => Number(s) + i)));
  const minus = (a, b) => [...a].filter((k) => !b.has(k)).sort((p, q) => p - q);
  for (const x of lists) {
    for (const y of lists) {
      let got;
      const t = new Task('/nonexistent', { onChange: (g, gained, lost) => { got = [gained, lost]; } });
      const msg = (rs) => ({ generation: '1', owned: rs.map(([s, e]) => ({ start: String(s), end: String(e) })) });
      t.apply(msg(x));
      got = [[], []]; // onChange is not called when nothing changed
      t.apply(msg(y));
      const [gained, lost] = got;
      assert.deepEqual([...keys(gained)].sort((p, q) => p - q), minus(keys(y), keys(x)), JSON.stringify([x, y]));
      assert.deepEqual([...keys(lost)].sort((p, q) => p - q), minus(keys(x), keys(y)), JSON.stringify([x, y]));
      assert.ok([...gained, ...lost].every(([s, e]) => s < e));
    }
  }
});

test('StateServer serves export and import as the sidecar calls them', async () => {
  const os = await import('node:os');
  const path = await import('node:path');
  const fs = await import('node:fs');
  const http = await import('node:http');
  const { StateServer } = await import('../index.js');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slicerd-task-'));
  const sock = path.join(dir, 'state.sock');
  const imported = [];
  const srv = await new StateServer(sock, {
    exporter: (start, end) => [[Buffer.from('a'), Buffer.from(`${start}-${end}`)]],
    importer: (entries) => { imported.push(...entries.map(([k, v]) => `${k}=${v}`)); },
  }).listen();
  assert.equal(fs.statSync(sock).mode & 0o777, 0o600);
  const call = (method, body, type) => new Promise((resolve, reject) => {
    const req = http.request({ socketPath: sock, path: `/slicer.v1.TaskStateService/${method}`, method: 'POST', headers: { 'Content-Type': type } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve([res.statusCode, Buffer.concat(chunks)]));
    });
    req.on('error', reject);
    req.end(body);
  });
  let [code] = await call('ImportState', JSON.stringify({ entries: [{ key: Buffer.from('k').toString('base64'), value: Buffer.from('v').toString('base64') }] }), 'application/json');
  assert.equal(code, 200);
  assert.deepEqual(imported, ['k=v']);
  const msg = Buffer.from('{"start":"1","end":"9"}');
  const env = Buffer.alloc(5); env.writeUInt32BE(msg.length, 1);
  let body;
  [code, body] = await call('ExportState', Buffer.concat([env, msg]), 'application/connect+json');
  assert.equal(code, 200);
  const first = JSON.parse(body.subarray(5, 5 + body.readUInt32BE(1)).toString());
  assert.equal(Buffer.from(first.entries[0].value, 'base64').toString(), '1-9');
  const rest = body.subarray(5 + body.readUInt32BE(1));
  assert.equal(rest.readUInt8(0), 2); // the end of the stream
  srv.close();
});

test('a handle within its promise is kept and released from memory', async () => {
  const os = await import('node:os');
  const path = await import('node:path');
  const fs = await import('node:fs');
  const http = await import('node:http');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slicerd-task-'));
  const sock = path.join(dir, 'sidecar.sock');
  const calls = [];
  let released7;
  const release7 = new Promise((resolve) => { released7 = resolve; });
  let next = 7;
  const answers = {
    AcquireHandle: () => ({ handle: String(next), owned: true, token: '12', validForNs: '1500000000', heldForNs: next++ === 7 ? '1000000000' : '1' }),
    ReleaseHandle: () => ({ continuous: false }),
    CheckHandle: () => ({ continuous: false }),
  };
  const srv = http.createServer((req, res) => {
    const method = req.url.split('/').pop();
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      calls.push(`${method} ${body}`);
      if (method === 'ReleaseHandle' && body === '{"handle":"7"}') released7();
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(answers[method]()));
    });
  });
  await new Promise((resolve) => srv.listen(sock, resolve));
  const t = new Task(sock);
  const h = await t.acquire('user:42');
  assert.notEqual(h.heldUntil, null);
  assert.equal(await h.kept(), true);
  assert.equal(await h.release(), true);
  assert.deepEqual(calls.map((c) => c.split(' ')[0]), ['AcquireHandle']); // neither kept() nor release() waited for a call
  // A promise that has passed: both ask the sidecar.
  const h2 = await t.acquire('user:43'); // promised for 1 ns: already past
  assert.equal(await h2.kept(), false);
  assert.equal(await h2.release(), false);
  await release7; // the first release's call, not waited for, lands
  assert.deepEqual(calls.map((c) => c.split(' ')[0]).sort(),
    ['AcquireHandle', 'AcquireHandle', 'CheckHandle', 'ReleaseHandle', 'ReleaseHandle']);
  assert.ok(calls.includes('ReleaseHandle {"handle":"7"}'));
  t.close();
  srv.close();
});
