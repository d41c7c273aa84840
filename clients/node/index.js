// A Node.js application as a slicerd task: a client of the local API that
// `slicerd sidecar --local-api-socket PATH` serves (slicer.v1.SidecarService,
// docs/api.md), over its Unix socket, with the Connect protocol (JSON over
// HTTP/1.1). It keeps the task's key ranges in memory, so owns(key) answers
// without a call, and relays load and drains. docs/sidecar.md is the
// contract.

import http from 'node:http';
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

/** The task as its application sees it through the sidecar. */
export class Task {
  #path;
  #starts = []; // BigInt range starts, sorted
  #ends = [];
  #generation = 0n;
  #req = null;
  #closed = false;
  #waiters = new Set();

  /** onChange, if given, is called with (generation, gained, lost) after
   * each change, ranges as [start, end] BigInt pairs. */
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
    const body = { loads: [...loads].map(([k, c]) => ({ key: Buffer.from(typeof k === 'string' ? encoder.encode(k) : k).toString('base64'), cost: c })) };
    await this.#unary('ReportLoad', body);
  }

  /** Drain the task (resolves once its keys moved) or end the drain. */
  async setDraining(draining) {
    await this.#unary('SetDraining', { draining: !!draining });
  }

  #unary(method, body) {
    const data = JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = http.request({ socketPath: this.#path, path: SERVICE + method, method: 'POST',
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
  }

  #watch(done) {
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
    this.#starts = owned.map((r) => r[0]);
    this.#ends = owned.map((r) => r[1]);
    this.#generation = BigInt(msg.generation ?? 0);
    for (const w of [...this.#waiters]) w();
    this.onChange?.(this.#generation, pairs(msg.gained), pairs(msg.lost));
  }
}
