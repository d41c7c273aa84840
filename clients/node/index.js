// A Node.js application as a slicerd task: a client of the local API that
// `slicerd sidecar --local-api-socket PATH` serves (slicer.v1.SidecarService,
// docs/api.md), over its Unix socket, with the Connect protocol (JSON over
// HTTP/1.1). It keeps the task's key ranges in memory, so owns(key) answers
// without a call, relays load and drains, takes handles on keys for strong
// jobs, and serves state handoff (StateServer). docs/sidecar.md is the
// contract.

import fs from 'node:fs';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import xxhash from 'xxhash-wasm';

const SERVICE = '/slicer.v1.SidecarService/';
const { h64Raw } = await xxhash();
const encoder = new TextEncoder();

/** The slice key of key (a string, as UTF-8, or bytes): XXH64 with seed 0,
 * shifted right by one bit, as every slicerd client computes it. A BigInt. */
export function sliceKey(key) {
  const bytes = typeof key === 'string' ? encoder.encode(key) : key;
  return h64Raw(bytes, 0n) >> 1n;
}

/** A local API call that failed; code is the Connect error code. */
export class LocalAPIError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
  }
}

const b64 = (k) => Buffer.from(typeof k === 'string' ? encoder.encode(k) : k).toString('base64');

/** A hold on one key for the span of a request (Task.acquire), as a Go
 * task's slicelet.Handle: owned, the fencing token (a BigInt), and in strong
 * mode deadline, the performance.now() by which the task's lease on the key
 * may end, counted from before the request was sent (null otherwise), and
 * heldUntil, the performance.now() until which the key stays the task's
 * without a break while the handle is held (null when the sidecar promised
 * nothing: affinity mode, or a move of the key had begun). Before
 * heldUntil, kept() and release() answer from memory and the release is
 * not waited for, so a request costs one round trip. */
export class Handle {
  #task;
  #wallUntil; // heldUntil on Date.now(): performance.now() stops while the host is suspended
  constructor(task, id, owned, token, deadline, heldUntil = null, wallUntil = null) {
    this.#task = task;
    this.id = id;
    this.owned = owned;
    this.token = token;
    this.deadline = deadline;
    this.heldUntil = heldUntil;
    this.#wallUntil = wallUntil;
    this.continuous = null; // release()'s answer, once released
  }

  /** Whether the promise holds now, on both clocks. */
  #held() {
    return this.heldUntil !== null && performance.now() < this.heldUntil && Date.now() < this.#wallUntil;
  }

  /** Whether the key has been the task's without a break since the handle
   * was taken, and still is: from memory before heldUntil, else by asking
   * the sidecar (check()). Ask it before making a result visible. */
  async kept() {
    return this.#held() ? true : this.check();
  }

  /** Whether the key has been the task's without a break since the handle
   * was taken, and still is; it also moves deadline on. */
  async check() {
    if (!this.id) return false;
    const sent = performance.now();
    const resp = await this.#task._unary('CheckHandle', { handle: this.id });
    const ns = Number(resp.validForNs ?? 0);
    if (ns > 0) this.deadline = sent + ns / 1e6;
    return !!resp.continuous;
  }

  /** Give the handle up; resolves to whether the key stayed the task's
   * until then. Releasing twice calls the sidecar once. */
  async release() {
    if (this.continuous === null) {
      if (!this.id) this.continuous = false;
      else if (this.#held()) {
        // Known here: the release need not be waited for. One that fails
        // leaves the handle to the sidecar's bound (docs/sidecar.md).
        this.continuous = true;
        this.#task._unary('ReleaseHandle', { handle: this.id }).catch(() => {});
      } else this.continuous = !!(await this.#task._unary('ReleaseHandle', { handle: this.id })).continuous;
    }
    return this.continuous;
  }
}

/** The task as its application sees it through the sidecar. */
export class Task {
  #path;
  #starts = []; // BigInt range starts, sorted
  #ends = [];
  #generation = 0n;
  #req = null;
  #closed = false;
  #waiters = new Set();
  #agent = new http.Agent({ keepAlive: true, maxSockets: 16 }); // unary calls reuse connections

  /** onChange, if given, is called with (generation, gained, lost) after
   * each change, ranges as [start, end] BigInt pairs: what the task gained
   * and lost since the call before, also across a restart of the sidecar. */
  constructor(socketPath, { onChange } = {}) {
    this.#path = socketPath;
    this.onChange = onChange;
    this.error = null; // why the ranges stream last failed
  }

  /** Whether the task holds key in the newest assignment it has heard of. */
  owns(key) {
    const h = sliceKey(key);
    let lo = 0, hi = this.#starts.length; // first start > h
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.#starts[mid] <= h) lo = mid + 1; else hi = mid;
    }
    return lo > 0 && h < this.#ends[lo - 1];
  }

  /** { generation, ranges: [[start, end], ...] } */
  ranges() {
    return { generation: this.#generation, ranges: this.#starts.map((s, i) => [s, this.#ends[i]]) };
  }

  /** Resolves once the ranges satisfy cond (a function of ranges()). */
  until(cond) {
    if (cond(this.ranges())) return Promise.resolve(this.ranges());
    return new Promise((resolve) => {
      const w = () => { if (cond(this.ranges())) { this.#waiters.delete(w); resolve(this.ranges()); } };
      this.#waiters.add(w);
    });
  }

  /** Count load: loads is an iterable of [key, cost]. */
  async reportLoad(loads) {
    const body = { loads: [...loads].map(([k, c]) => ({ key: b64(k), cost: c })) };
    await this._unary('ReportLoad', body);
  }

  /** Drain the task (resolves once its keys moved) or end the drain. */
  async setDraining(draining) {
    await this._unary('SetDraining', { draining: !!draining });
  }

  /** Take a handle on key; wait (seconds, at most 10) lets a key whose
   * lease is on its way be waited for. A handle not owned needs no
   * release. */
  async acquire(key, { wait = 0 } = {}) {
    const sent = performance.now();
    const sentWall = Date.now();
    const resp = await this._unary('AcquireHandle', { key: b64(key), waitMs: Math.round(wait * 1000) });
    const ns = Number(resp.validForNs ?? 0);
    const held = Number(resp.heldForNs ?? 0);
    return new Handle(this, resp.handle ?? '0', !!resp.owned, BigInt(resp.token ?? 0), ns > 0 ? sent + ns / 1e6 : null,
      held > 0 ? sent + held / 1e6 : null, held > 0 ? sentWall + held / 1e6 : null);
  }

  /** Wait (at most wait seconds, at most 10) until the state of key, if a
   * handoff is bringing it, has been imported; call it on a miss. Resolves
   * to false if the wait ended first. */
  async awaitState(key, { wait = 1 } = {}) {
    return !!(await this._unary('AwaitState', { key: b64(key), waitMs: Math.round(wait * 1000) })).done;
  }

  /** One unary call of the local API (for Handle). */
  _unary(method, body) {
    const data = JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = http.request({ socketPath: this.#path, path: SERVICE + method, method: 'POST', agent: this.#agent,
        headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          if (res.statusCode !== 200) {
            let err = { code: 'unknown', message: text };
            try { err = JSON.parse(text); } catch {}
            reject(new LocalAPIError(err.code ?? 'unknown', err.message ?? ''));
            return;
          }
          resolve(text ? JSON.parse(text) : {});
        });
      });
      req.on('error', reject);
      req.end(data);
    });
  }

  /** Follow the task's ranges; reopens the stream, backing off to 2 s,
   * when the sidecar starts late or restarts. */
  start() {
    let backoff = 100;
    const open = () => {
      if (this.#closed) return;
      this.#watch((err) => {
        if (this.#closed) return;
        if (err) this.error = err; else backoff = 100;
        setTimeout(open, backoff).unref();
        backoff = Math.min(backoff * 2, 2000);
      });
    };
    open();
    return this;
  }

  /** Stop following the ranges. */
  close() {
    this.#closed = true;
    this.#req?.destroy();
    this.#agent.destroy();
  }

  #watch(then) {
    // A stream's end is told once: a stream ending with an error tells
    // it in its end-of-stream message, and then the response ends too.
    let told = false;
    const done = (err) => { if (!told) { told = true; then(err); } };
    const body = Buffer.alloc(5 + 2);
    body.writeUInt8(0, 0);
    body.writeUInt32BE(2, 1);
    body.write('{}', 5);
    const req = http.request({ socketPath: this.#path, path: SERVICE + 'WatchRanges', method: 'POST',
      headers: { 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1', 'Content-Length': body.length } }, (res) => {
      if (res.statusCode !== 200) { res.resume(); done(new LocalAPIError('unknown', `WatchRanges answered HTTP ${res.statusCode}`)); return; }
      let buf = Buffer.alloc(0);
      res.on('data', (chunk) => {
        buf = Buffer.concat([buf, chunk]);
        while (buf.length >= 5) {
          const size = buf.readUInt32BE(1);
          if (buf.length < 5 + size) break;
          const flags = buf.readUInt8(0);
          const msg = JSON.parse(buf.subarray(5, 5 + size).toString() || '{}');
          buf = buf.subarray(5 + size);
          if (flags & 0x02) {
            if (msg.error) done(new LocalAPIError(msg.error.code ?? 'unknown', msg.error.message ?? ''));
            return;
          }
          this.error = null;
          this.apply(msg);
        }
      });
      res.on('end', () => done(null));
      res.on('error', done);
    });
    req.on('error', done);
    this.#req = req;
    req.end(body);
  }

  /** Apply one WatchRanges message (exported for tests). */
  apply(msg) {
    const pairs = (rs) => (rs ?? []).map((r) => [BigInt(r.start ?? 0), BigInt(r.end ?? 0)]);
    const owned = pairs(msg.owned);
    // gained and lost against the ranges the application last heard of,
    // not the message's: those count from the previous message on the same
    // stream, and the first message of a stream reopened after a break (the
    // sidecar restarted) gains every range and loses none.
    const prev = this.#starts.map((s, i) => [s, this.#ends[i]]);
    this.#starts = owned.map((r) => r[0]);
    this.#ends = owned.map((r) => r[1]);
    this.#generation = BigInt(msg.generation ?? 0);
    for (const w of [...this.#waiters]) w();
    const gained = subtract(owned, prev);
    const lost = subtract(prev, owned);
    if (gained.length > 0 || lost.length > 0) this.onChange?.(this.#generation, gained, lost);
  }
}

/** The parts of the sorted, merged ranges x outside those of y. */
function subtract(x, y) {
  const out = [];
  let j = 0;
  for (const [s, end] of x) {
    let start = s;
    while (j < y.length && y[j][1] <= start) j++;
    for (let k = j; k < y.length && y[k][0] < end; k++) {
      if (y[k][0] > start) out.push([start, y[k][0]]);
      if (y[k][1] > start) start = y[k][1];
      if (y[k][1] >= end) break;
    }
    if (start < end) out.push([start, end]);
  }
  return out;
}

const STATE_SERVICE = '/slicer.v1.TaskStateService/';
const EXPORT_CHUNK = 512 << 10; // raw bytes of keys and values per message
const MAX_BODY = 8 << 20;

function envelope(flags, obj) {
  const payload = Buffer.from(JSON.stringify(obj));
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** Serves `slicerd sidecar --app-state-socket PATH`
 * (slicer.v1.TaskStateService): the sidecar calls exporter(start, end)
 * (BigInt slice keys; returns or resolves to an iterable of [key, value]
 * Buffers) for the state of keys another task gains, and importer(entries)
 * (an array of [key, value] Buffers) with the state of keys this task
 * gains. importer must not replace an entry the application already holds.
 * The socket is created mode 0600; Node offers no peer-credential check, so
 * keep it in a directory only the application's user can reach. */
export class StateServer {
  #server;
  #path;
  constructor(socketPath, { exporter, importer }) {
    this.#path = socketPath;
    this.#server = http.createServer((req, res) => {
      const chunks = [];
      let size = 0;
      req.on('data', (c) => {
        size += c.length;
        if (size > MAX_BODY) { req.destroy(); return; }
        chunks.push(c);
      });
      req.on('end', () => this.#serve(req.url, Buffer.concat(chunks), res, exporter, importer).catch((e) => {
        if (!res.headersSent) {
          res.writeHead(500, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify({ code: 'internal', message: String(e) }));
        } else res.destroy();
      }));
    });
  }

  async #serve(url, body, res, exporter, importer) {
    if (url === STATE_SERVICE + 'ImportState') {
      const msg = JSON.parse(body.toString() || '{}');
      await importer((msg.entries ?? []).map((e) => [Buffer.from(e.key ?? '', 'base64'), Buffer.from(e.value ?? '', 'base64')]));
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{}');
      return;
    }
    if (url !== STATE_SERVICE + 'ExportState') {
      res.writeHead(404, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ code: 'unimplemented', message: `no method ${url}` }));
      return;
    }
    const msg = JSON.parse(body.subarray(5, 5 + body.readUInt32BE(1)).toString() || '{}');
    res.writeHead(200, { 'Content-Type': 'application/connect+json' });
    let end = {};
    try {
      let batch = [], bytes = 0;
      for (const [k, v] of await exporter(BigInt(msg.start ?? 0), BigInt(msg.end ?? 0))) {
        batch.push({ key: Buffer.from(k).toString('base64'), value: Buffer.from(v).toString('base64') });
        bytes += k.length + v.length;
        if (bytes >= EXPORT_CHUNK) { res.write(envelope(0, { entries: batch })); batch = []; bytes = 0; }
      }
      if (batch.length) res.write(envelope(0, { entries: batch }));
    } catch (e) {
      end = { error: { code: 'internal', message: `ExportState: ${e}` } };
    }
    res.end(envelope(0x02, end));
  }

  /** Listen on the socket; resolves once it does. */
  listen() {
    try { fs.unlinkSync(this.#path); } catch {}
    const old = process.umask(0o177);
    return new Promise((resolve, reject) => {
      this.#server.once('error', (e) => { process.umask(old); reject(e); });
      this.#server.listen(this.#path, () => { process.umask(old); resolve(this); });
    });
  }

  close() {
    this.#server.close();
    try { fs.unlinkSync(this.#path); } catch {}
  }
}
