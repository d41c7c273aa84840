// Tests of slicerd-task that need no sidecar; e2e/sidecarapps_test.go
// runs the library against a real one (TestSidecarNodeTask).
import test from 'node:test';
import assert from 'node:assert/strict';
import { sliceKey, Task } from '../index.js';

// docs/api.md, "From a key to a task": the vectors every client must reproduce.
const vectors = [
  [Buffer.from(''), 8620854627038688460n],
  [Buffer.from('a'), 7577133169179506477n],
  [Buffer.from('user:42'), 7930827119023188193n],
  [Buffer.from('hello world'), 2510109842829423796n],
  [Buffer.from('slicerd'), 2697739235159553904n],
  [Buffer.from([0x00, 0xff]), 8101059617436044990n],
];

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
