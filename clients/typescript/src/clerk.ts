// The Clerk: follows one job's assignment from slicerd's Distributors (or
// Backups) and routes keys to its tasks, as docs/client-contract.md
// requires and slicerd's Go Clerk (clerk.Clerk) does.

import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { EventEmitter } from "node:events";
import type { PeerCertificate } from "node:tls";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import {
  BackupService,
  DistributorService,
  type WatchAssignmentResponse,
} from "./gen/slicer/v1/slicer_pb.js";
import {
  isReset,
  receive,
  supersedes,
  validateJobName,
  versionOf,
  type Assignment,
  type Task,
} from "./assignment.js";
import { CacheWriter, decodeCache } from "./cache.js";
import { DeltaError, InvalidAssignmentError, InvalidConfigError } from "./errors.js";
import { describe, sliceKey } from "./hash.js";
import { frontendIndex, subsetOf } from "./subset.js";
import { Table } from "./table.js";

/** The delta format the Clerk applies (WatchAssignmentRequest.delta_version). */
export const DELTA_VERSION = 1;

/** The largest WatchAssignment message the Clerk reads, after
 * decompression: 1 GiB, as the Python Clerk and the Go Clerk's cache file. */
const MAX_MESSAGE_BYTES = 1 << 30;

/** Heartbeats (docs/api.md, "Heartbeats"): the Clerk asks for them with
 * HEARTBEAT_HEADER; a server that sends them announces their interval in
 * milliseconds in HEARTBEAT_INTERVAL_HEADER, and a stream of such a server
 * that brings no message for HEARTBEAT_MISSES intervals is dropped for the
 * next server. A server that announces nothing keeps its stream as long as
 * it stays open. */
const HEARTBEAT_HEADER = "Slicerd-Heartbeat";
const HEARTBEAT_INTERVAL_HEADER = "Slicerd-Heartbeat-Interval";
const HEARTBEAT_MISSES = 4;

/** The heartbeat interval headers announce, in milliseconds; 0 for none or an unreadable one. */
function announcedHeartbeat(h: Headers): number {
  const v = h.get(HEARTBEAT_INTERVAL_HEADER);
  if (v === null || !/^[0-9]{1,10}$/.test(v)) return 0;
  const ms = Number(v);
  return ms > 0 && ms <= 3_600_000 ? ms : 0;
}

/** Where log lines go; every method is optional. */
export interface Logger {
  debug?(msg: string, fields?: Record<string, unknown>): void;
  info?(msg: string, fields?: Record<string, unknown>): void;
  warn?(msg: string, fields?: Record<string, unknown>): void;
  error?(msg: string, fields?: Record<string, unknown>): void;
}

/** TLS to slicerd: the CA that signs its certificates, and this client's
 * certificate and key (PEM), each optional. */
export interface TLSOptions {
  ca?: string | Buffer;
  cert?: string | Buffer;
  key?: string | Buffer;
  /** The name to check the server's certificate against, when not its host. */
  servername?: string;
}

export interface ClerkOptions {
  /** The job whose assignment the Clerk follows. */
  job: string;
  /** Distributor RPC addresses, host:port. */
  addrs?: readonly string[];
  /** Backup Distributor addresses, tried when no Distributor answers. */
  backupAddrs?: readonly string[];
  /** Called before every round of attempts; replaces addrs and backupAddrs. */
  resolver?: () => { distributors: readonly string[]; backups: readonly string[] };
  /** Distributors known to be down: they keep their place in the subset numbering but are skipped. */
  down?: () => readonly string[];
  /** Calls slicerd over TLS; without it, HTTP/2 in cleartext (h2c). */
  tls?: TLSOptions;
  /** Sent as "Authorization: Bearer TOKEN" with every call; use it only over TLS. */
  token?: string;
  /** Bounds of the jittered wait between rounds of attempts; 100 and 5000 by default. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** How long a stream from a Backup or a non-preferred Distributor lasts; 30000 by default. */
  backupRecheckMs?: number;
  /** Preferred Distributors (subsetting); 3 by default, 0 for none. */
  subsetSize?: number;
  /** This client's identity for subsetting (its frontend number is XXH64 of it); hostname:pid by default. */
  id?: string;
  /** This client's frontend number, used instead of a hash of id. */
  frontend?: bigint;
  /** A file where the Clerk keeps the newest assignment, to route at once after a restart. */
  cacheFile?: string;
  /** Called after every installed assignment; prev is undefined the first time. */
  onAssignment?: (next: Assignment, prev: Assignment | undefined) => void;
  logger?: Logger;
}

/** Where a key goes: one task of its slice and its address. */
export interface Route {
  task: string;
  address: string;
}

export interface LookupOptions {
  /** Task names or addresses not to choose, such as a replica that just failed. */
  skip?: Iterable<string>;
}

interface Target {
  addr: string;
  backup: boolean;
  /** Not a preferred server: the stream ends after backupRecheckMs. */
  fallback: boolean;
  /** The preferred Distributors when the round was planned. */
  pref: readonly string[];
}

interface Outcome {
  ok: boolean;
  err?: unknown;
}

const DEFAULTS = { minBackoffMs: 100, maxBackoffMs: 5000, backupRecheckMs: 30000, subsetSize: 3 };

function checkAddrs(name: string, v: unknown): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.some((a) => typeof a !== "string" || a === "")) {
    throw new InvalidConfigError(`slicerd Clerk: ${name} must be an array of host:port strings`);
  }
  return [...v];
}

function checkPositive(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) {
    throw new InvalidConfigError(`slicerd Clerk: ${name} must be a positive number of milliseconds, not ${describe(v)}`);
  }
  return v;
}

/**
 * Keeps a local copy of one job's assignment, streamed from slicerd, and
 * maps keys to the tasks that serve them. Lookups never wait for the
 * network: the Clerk keeps routing by the assignment it holds while
 * slicerd is unreachable. Emits "assignment" (next, prev) after each
 * installed assignment.
 */
export class Clerk extends EventEmitter {
  readonly job: string;
  private readonly addrs: string[];
  private readonly backupAddrs: string[];
  private readonly opts: ClerkOptions;
  private readonly minBackoff: number;
  private readonly maxBackoff: number;
  private readonly backupRecheck: number;
  private readonly subsetSize: number;
  private readonly frontend: bigint;
  private readonly log: Logger;
  private readonly cache: CacheWriter | undefined;

  private table: Table | undefined;
  // heard is the newest assignment a server sent this process: its version
  // is what a watch sends, and a stream's first delta applies to it. It
  // lags the held assignment while that came from the cache file, so the
  // first server answers with its current one.
  private heard: Assignment | undefined;
  private fromCache: Assignment | undefined;
  private readonly transports = new Map<string, { transport: Transport; sessions: Http2SessionManager }>();
  private readonly stop = new AbortController();
  private running: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private streamWake: (() => void) | undefined;
  private readyWaiters: (() => void)[] = [];
  private nextDist = Math.floor(Math.random() * 1e9);
  private nextBackup = Math.floor(Math.random() * 1e9);

  constructor(options: ClerkOptions) {
    super();
    if (!options || typeof options !== "object") throw new InvalidConfigError("slicerd Clerk: options must be an object with at least job and addrs");
    try {
      validateJobName(options.job);
    } catch (e) {
      throw new InvalidConfigError(`slicerd Clerk: ${(e as Error).message}`);
    }
    this.job = options.job;
    this.opts = options;
    this.addrs = checkAddrs("addrs", options.addrs);
    this.backupAddrs = checkAddrs("backupAddrs", options.backupAddrs);
    if (options.resolver !== undefined && typeof options.resolver !== "function") throw new InvalidConfigError("slicerd Clerk: resolver must be a function");
    if (options.down !== undefined && typeof options.down !== "function") throw new InvalidConfigError("slicerd Clerk: down must be a function");
    if (!options.resolver && this.addrs.length === 0 && this.backupAddrs.length === 0) {
      throw new InvalidConfigError(`slicerd Clerk: job ${JSON.stringify(this.job)}: no server address; set addrs to the slicerd Distributors' RPC addresses or set a resolver`);
    }
    this.minBackoff = checkPositive("minBackoffMs", options.minBackoffMs, DEFAULTS.minBackoffMs);
    this.maxBackoff = checkPositive("maxBackoffMs", options.maxBackoffMs, Math.max(DEFAULTS.maxBackoffMs, this.minBackoff));
    if (this.maxBackoff < this.minBackoff) throw new InvalidConfigError(`slicerd Clerk: maxBackoffMs ${this.maxBackoff} is below minBackoffMs ${this.minBackoff}`);
    this.backupRecheck = checkPositive("backupRecheckMs", options.backupRecheckMs, DEFAULTS.backupRecheckMs);
    const k = options.subsetSize ?? DEFAULTS.subsetSize;
    if (!Number.isInteger(k) || k < 0) throw new InvalidConfigError(`slicerd Clerk: subsetSize must be a whole number, 0 for no subsetting, not ${describe(k)}`);
    this.subsetSize = k;
    if (options.frontend !== undefined) {
      if (typeof options.frontend !== "bigint" || options.frontend < 0n || options.frontend >= 1n << 64n) {
        throw new InvalidConfigError("slicerd Clerk: frontend must be a BigInt in [0, 2^64)");
      }
      this.frontend = options.frontend;
    } else {
      if (options.id !== undefined && typeof options.id !== "string") throw new InvalidConfigError("slicerd Clerk: id must be a string");
      this.frontend = frontendIndex(options.id || `${os.hostname()}:${process.pid}`);
    }
    if (options.token !== undefined && (typeof options.token !== "string" || options.token === "" || /[\r\n]/.test(options.token))) {
      throw new InvalidConfigError("slicerd Clerk: token must be a non-empty string on one line");
    }
    if (options.onAssignment !== undefined && typeof options.onAssignment !== "function") throw new InvalidConfigError("slicerd Clerk: onAssignment must be a function");
    this.log = safeLogger(options.logger ?? {});
    if (options.cacheFile !== undefined) {
      if (typeof options.cacheFile !== "string" || options.cacheFile === "") throw new InvalidConfigError("slicerd Clerk: cacheFile must be a file path");
      try {
        fs.accessSync(path.dirname(path.resolve(options.cacheFile)), fs.constants.W_OK);
      } catch (e) {
        throw new InvalidConfigError(`slicerd Clerk: job ${JSON.stringify(this.job)}: cache file ${options.cacheFile}: its directory is not writable: ${(e as Error).message}`);
      }
      this.cache = new CacheWriter(options.cacheFile, (err) =>
        this.log.warn?.("clerk: cannot write the assignment cache file; routing is unaffected", { job: this.job, file: options.cacheFile, err: String(err) }));
      this.loadCache(options.cacheFile);
    }
  }

  private loadCache(file: string): void {
    let text: string;
    try {
      text = fs.readFileSync(file, "utf8");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") {
        this.log.info?.("clerk: no assignment cache file yet; waiting for slicerd", { job: this.job, file });
        return;
      }
      this.log.warn?.("clerk: cannot read the assignment cache file; starting without an assignment", { job: this.job, file, err: String(e) });
      return;
    }
    let a: Assignment;
    try {
      a = decodeCache(text, this.job);
    } catch (e) {
      this.log.warn?.("clerk: ignoring the assignment cache file; starting without an assignment and fetching one from slicerd, which will overwrite the file", { job: this.job, file, err: String(e) });
      return;
    }
    this.table = new Table(a);
    this.fromCache = a;
    this.log.info?.("clerk: routing on the cached assignment until slicerd answers", { job: this.job, file, generation: a.generation, incarnation: a.incarnation });
  }

  /** The assignment held, or undefined before the first one. */
  get assignment(): Assignment | undefined {
    return this.table?.assignment;
  }

  /** The held assignment's generation, 0n when none. */
  get generation(): bigint {
    return this.table?.assignment.generation ?? 0n;
  }

  /** The tasks (and addresses) serving key's slice, in the assignment's order, or undefined before the first assignment. */
  tasksFor(key: Uint8Array | string): readonly Task[] | undefined {
    const h = sliceKey(key);
    const t = this.table;
    return t?.slice(t.find(h));
  }

  /**
   * One task serving key, chosen at random among its slice's replicas that
   * have an address and are not in options.skip (names or addresses), or
   * undefined before the first assignment or when none is left.
   */
  lookup(key: Uint8Array | string, options?: LookupOptions): Route | undefined {
    const tasks = this.tasksFor(key);
    if (!tasks) return undefined;
    let skip: Set<string> | undefined;
    if (options?.skip !== undefined) {
      if (typeof options.skip === "string" || typeof (options.skip as Iterable<string>)[Symbol.iterator] !== "function") {
        throw new TypeError("slicerd Clerk: lookup's skip must be an iterable of task names or addresses, such as an array or a Set");
      }
      skip = new Set(options.skip);
    }
    const n = tasks.length;
    const from = Math.floor(Math.random() * n);
    for (let k = 0; k < n; k++) {
      const t = tasks[(from + k) % n];
      if (t.address !== "" && !skip?.has(t.name) && !skip?.has(t.address)) return { task: t.name, address: t.address };
    }
    return undefined;
  }

  /** Resolves once an assignment is held; rejects after timeoutMs, or when the Clerk closes first. */
  ready(timeoutMs?: number): Promise<void> {
    if (this.table) return Promise.resolve();
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        clearTimeout(timer);
        this.stop.signal.removeEventListener("abort", closed);
        resolve();
      };
      const closed = () => {
        clearTimeout(timer);
        this.readyWaiters = this.readyWaiters.filter((w) => w !== done);
        reject(new Error(`slicerd Clerk: job ${JSON.stringify(this.job)}: closed before the first assignment`));
      };
      if (this.stop.signal.aborted) return closed();
      this.stop.signal.addEventListener("abort", closed, { once: true });
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          this.stop.signal.removeEventListener("abort", closed);
          this.readyWaiters = this.readyWaiters.filter((w) => w !== done);
          reject(new Error(`slicerd Clerk: no assignment for job ${JSON.stringify(this.job)} within ${timeoutMs} ms; is slicerd reachable at the configured addresses?`));
        }, timeoutMs);
      }
      this.readyWaiters.push(done);
    });
  }

  /** Starts watching the assignment; returns this. Calling it again does nothing. */
  start(): this {
    if (this.stop.signal.aborted) throw new Error("slicerd Clerk: start after close; create a new Clerk");
    if (!this.running) {
      this.running = this.run().catch((err) => {
        this.log.error?.("clerk: the watch loop failed", { job: this.job, err: String(err) });
      });
    }
    return this;
  }

  /** Ends the current wait between attempts, so a change of servers is
   * acted on at once; with subsetting, it also ends an open stream when
   * the change alters this client's subset and the stream is not on its
   * first choice. */
  resolveNow(): void {
    this.wake?.();
    this.streamWake?.();
  }

  /** Stops every stream, timer and connection the Clerk started, and writes the cache file's last update. */
  async close(): Promise<void> {
    this.stop.abort();
    await this.running;
    for (const { sessions } of this.transports.values()) sessions.abort();
    this.transports.clear();
    await this.cache?.flush();
  }

  private async run(): Promise<void> {
    const signal = this.stop.signal;
    const cached = this.fromCache;
    this.fromCache = undefined;
    if (cached && this.table?.assignment === cached) this.notify(cached, undefined);
    let backoff = this.minBackoff;
    let failing = false;
    while (!signal.aborted) {
      let outcome: Outcome;
      try {
        const { distributors, backups } = this.resolve();
        outcome = await this.round(distributors, backups);
      } catch (e) {
        outcome = { ok: false, err: e }; // a resolver that throws: retry with backoff
      }
      const { ok, err } = outcome;
      if (signal.aborted) return;
      if (ok) {
        backoff = this.minBackoff;
        failing = false;
      } else if (!failing && this.generation === 0n && codeOf(err) === Code.NotFound) {
        failing = true;
        this.log.info?.("clerk: slicerd does not know the job yet; retrying until one of its tasks joins or it is configured", { job: this.job, err: String(err) });
      } else if (!failing) {
        failing = true;
        this.log.warn?.("clerk: no slicerd server answered; keeping the current assignment and retrying", { job: this.job, generation: this.generation, err: String(err) });
      } else {
        this.log.debug?.("clerk: retry round failed", { job: this.job, backoffMs: backoff, err: String(err) });
      }
      // Always pause a little, even after a healthy stream, so that a
      // server that accepts and drops streams cannot make the Clerk spin.
      await this.sleep(backoff / 2 + Math.random() * (backoff / 2));
      if (!ok) backoff = Math.min(2 * backoff, this.maxBackoff);
    }
  }

  private sleep(ms: number): Promise<void> {
    const signal = this.stop.signal;
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
      this.wake = done;
      if (signal.aborted) done();
    });
  }

  private resolve(): { distributors: readonly string[]; backups: readonly string[] } {
    if (this.opts.resolver) {
      const r = this.opts.resolver();
      return { distributors: checkAddrs("resolver's distributors", r?.distributors ?? []), backups: checkAddrs("resolver's backups", r?.backups ?? []) };
    }
    return { distributors: this.addrs, backups: this.backupAddrs };
  }

  /** One round's attempts: the preferred Distributors in order, then the
   * other Distributors, then the Backups, each rotated so that clients that
   * fall back spread out. */
  plan(distributors: readonly string[], backups: readonly string[]): Target[] {
    const { pref, rest } = this.preferred(distributors);
    const out: Target[] = pref.map((addr) => ({ addr, backup: false, fallback: false, pref }));
    const rotate = (addrs: readonly string[], start: number, backup: boolean, fallback: boolean) => {
      for (let k = 0; k < addrs.length; k++) out.push({ addr: addrs[(start + k) % addrs.length], backup, fallback, pref });
    };
    rotate(rest, this.nextDist, false, pref.length > 0);
    rotate(backups, this.nextBackup, true, true);
    return out;
  }

  /** This client's subset of distributors in preference order, and the
   * others; without subsetting, none preferred. Distributors that down()
   * lists keep their place in the numbering but are skipped. */
  private preferred(distributors: readonly string[]): { pref: string[]; rest: string[] } {
    if (this.subsetSize <= 0 || distributors.length === 0) return { pref: [], rest: [...distributors] };
    return subsetOf(this.frontend, this.subsetSize, distributors, this.opts.down?.() ?? []);
  }

  private async round(distributors: readonly string[], backups: readonly string[]): Promise<Outcome> {
    let last: unknown;
    for (const t of this.plan(distributors, backups)) {
      if (t.fallback) {
        if (t.backup) this.nextBackup++;
        else this.nextDist++;
      }
      const { ok, err } = await this.watch(t);
      if (this.stop.signal.aborted) return { ok: false };
      if (ok) return { ok: true };
      if (last === undefined || codeOf(last) === Code.NotFound) last = err; // NotFound only when every server said so
      this.log.debug?.("clerk: server did not answer", { job: this.job, addr: t.addr, backup: t.backup, err: String(err) });
    }
    return { ok: false, err: last ?? new Error("no server address known") };
  }

  private transport(addr: string): Transport {
    let entry = this.transports.get(addr);
    if (!entry) {
      const tls = this.opts.tls;
      const baseUrl = `${tls ? "https" : "http"}://${addr}`;
      const nodeOptions = tls
        ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.servername, checkServerIdentity: agentIdentity }
        : {};
      const sessions = new Http2SessionManager(baseUrl, { pingIntervalMs: 10_000, pingTimeoutMs: 5_000, idleConnectionTimeoutMs: 60_000 }, nodeOptions);
      const interceptors: Interceptor[] = [];
      const token = this.opts.token;
      if (token) {
        interceptors.push((next) => async (req) => {
          req.header.set("Authorization", `Bearer ${token}`);
          return next(req);
        });
      }
      // readMaxBytes: a message (after decompression) larger than any real
      // assignment is refused at its length prefix; by default connect-node
      // allocates whatever the prefix declares, up to 4 GiB.
      entry = { transport: createGrpcTransport({ baseUrl, sessionManager: sessions, interceptors, readMaxBytes: MAX_MESSAGE_BYTES }), sessions };
      this.transports.set(addr, entry);
    }
    return entry.transport;
  }

  /** Runs one stream. It was healthy if it delivered a valid message or
   * stayed open for at least maxBackoff; a stream on a fallback server
   * ends after backupRecheck, and that counts as healthy. A stream whose
   * server announced heartbeats and then sent no message for
   * HEARTBEAT_MISSES intervals (stalled mid-message, or silent with its
   * connection up) fails, so the next server is tried. */
  private async watch(t: Target): Promise<Outcome> {
    const ctrl = new AbortController();
    const stopAll = () => ctrl.abort();
    this.stop.signal.addEventListener("abort", stopAll, { once: true });
    let recheck: NodeJS.Timeout | undefined;
    let rechecked = false;
    if (t.fallback) {
      recheck = setTimeout(() => {
        rechecked = true;
        ctrl.abort();
      }, this.backupRecheck);
    }
    let moved = false;
    if (this.subsetSize > 0) {
      this.streamWake = () => {
        let pref: string[];
        try {
          pref = this.preferred(this.resolve().distributors).pref;
        } catch {
          return;
        }
        const same = pref.length === t.pref.length && pref.every((a, i) => a === t.pref[i]);
        if (same || (pref.length > 0 && pref[0] === t.addr)) return;
        this.log.info?.("clerk: the Distributors changed; moving the stream to this client's subset", { job: this.job, addr: t.addr, subset: pref });
        moved = true;
        ctrl.abort();
      };
    }
    let silenceLimit = 0;
    let silenceTimer: NodeJS.Timeout | undefined;
    let silent = false;
    const heard = () => {
      if (silenceLimit <= 0) return;
      clearTimeout(silenceTimer);
      silenceTimer = setTimeout(() => {
        silent = true;
        ctrl.abort();
      }, silenceLimit);
    };
    const began = Date.now();
    const known = versionOf(this.heard);
    let delivered = false;
    let err: unknown;
    try {
      const client = createClient(t.backup ? BackupService : DistributorService, this.transport(t.addr));
      const stream = client.watchAssignment(
        { job: this.job, knownGeneration: known.generation, knownIncarnation: known.incarnation, deltaVersion: DELTA_VERSION },
        {
          signal: ctrl.signal,
          headers: { [HEARTBEAT_HEADER]: "1" },
          onHeader: (h) => {
            silenceLimit = HEARTBEAT_MISSES * announcedHeartbeat(h);
            heard();
          },
        },
      );
      for await (const msg of stream) {
        heard();
        if (msg.assignment === undefined && msg.delta === undefined) continue; // a heartbeat
        const refused = this.handle(msg, t);
        if (refused) return { ok: false, err: refused };
        if (!delivered) this.log.info?.("clerk: streaming assignments", { job: this.job, addr: t.addr, backup: t.backup, fallback: t.fallback, generation: this.generation });
        delivered = true;
        heard(); // the time spent on the message was not silence
      }
    } catch (e) {
      err = e;
    } finally {
      clearTimeout(recheck);
      clearTimeout(silenceTimer);
      this.streamWake = undefined;
      this.stop.signal.removeEventListener("abort", stopAll);
      ctrl.abort();
    }
    if (rechecked) return { ok: true };
    if (silent && !moved && !this.stop.signal.aborted) {
      const e = new Error(`assignment stream went silent: no message for ${silenceLimit} ms (${HEARTBEAT_MISSES} heartbeat intervals the server announced)`);
      this.log.warn?.("clerk: the server's assignment stream went silent although the server promised heartbeats; keeping the held assignment and trying another server", { job: this.job, addr: t.addr, backup: t.backup, generation: this.generation });
      return { ok: false, err: e };
    }
    const healthy = delivered || Date.now() - began >= this.maxBackoff || moved;
    if (healthy && !this.stop.signal.aborted) this.log.info?.("clerk: assignment stream ended; reconnecting", { job: this.job, addr: t.addr, backup: t.backup, err: String(err) });
    return { ok: healthy, err };
  }

  /** Applies one message; returns the error that drops the stream, if any. */
  private handle(msg: WatchAssignmentResponse, t: Target): Error | undefined {
    let a: Assignment;
    try {
      a = receive(this.heard, msg);
    } catch (e) {
      if (e instanceof DeltaError) {
        // Watch again from nothing: the server sends the full assignment,
        // and the held one serves until it arrives.
        this.heard = undefined;
        this.log.warn?.("clerk: server sent a delta that does not apply to the assignment it was sent for; keeping the held assignment and watching again for a full one", { job: this.job, addr: t.addr, err: e.message });
        return e;
      }
      this.log.error?.("clerk: server sent an assignment that is not valid; dropping the stream and trying another server", { job: this.job, addr: t.addr, err: String(e) });
      return e as Error;
    }
    if (a.job !== this.job) {
      const e = new InvalidAssignmentError(`invalid assignment: asked for job ${JSON.stringify(this.job)}, got job ${JSON.stringify(a.job)}`);
      this.log.error?.("clerk: server sent an assignment of another job; dropping the stream and trying another server", { job: this.job, addr: t.addr });
      return e;
    }
    this.accept(a);
    return undefined;
  }

  /** Installs a, a valid assignment of the job, if it supersedes the held one. */
  private accept(a: Assignment): void {
    const v = versionOf(a);
    if (supersedes(v, versionOf(this.heard))) this.heard = a;
    const prev = this.table?.assignment;
    if (prev && !supersedes(v, versionOf(prev))) {
      if (a.generation < prev.generation) {
        this.log.warn?.("clerk: slicerd sent an older generation than the one held, from the same store (or one without an incarnation); keeping the held one. If slicerd's store was restored from an older copy or reset, restart this client, deleting its cache file if it has one", { job: this.job, generation: a.generation, held: prev.generation });
      } else {
        this.log.debug?.("clerk: ignoring assignment that is not newer", { job: this.job, generation: a.generation, held: prev.generation });
      }
      return;
    }
    if (prev && isReset(v, versionOf(prev))) {
      this.log.info?.("clerk: slicerd's assignment store was recreated; replacing the held assignment with the new store's", { job: this.job, generation: a.generation, incarnation: a.incarnation, held: prev.generation, heldIncarnation: prev.incarnation });
    }
    this.table = new Table(a);
    this.cache?.store(a);
    if (!prev) this.log.info?.("clerk: first assignment", { job: this.job, generation: a.generation, tasks: a.tasks.length, slices: a.slices.length });
    this.notify(a, prev);
  }

  private notify(a: Assignment, prev: Assignment | undefined): void {
    const waiters = this.readyWaiters;
    this.readyWaiters = [];
    for (const w of waiters) w();
    try {
      this.opts.onAssignment?.(a, prev);
      this.emit("assignment", a, prev);
    } catch (e) {
      this.log.error?.("clerk: an assignment listener threw", { job: this.job, err: String(e) });
    }
  }
}

/** logger with BigInt fields turned into decimal strings, which every
 * logger can print (JSON.stringify cannot print a BigInt), and its own
 * failures ignored: logging never stops the Clerk. */
function safeLogger(logger: Logger): Logger {
  const wrap = (f: ((msg: string, fields?: Record<string, unknown>) => void) | undefined) =>
    f &&
    ((msg: string, fields?: Record<string, unknown>) => {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(fields ?? {})) out[k] = typeof v === "bigint" ? v.toString() : v;
      try {
        f.call(logger, msg, out);
      } catch {
        // A logger that throws must not stop the watch.
      }
    });
  return { debug: wrap(logger.debug), info: wrap(logger.info), warn: wrap(logger.warn), error: wrap(logger.error) };
}

function codeOf(err: unknown): Code | undefined {
  return err instanceof ConnectError ? err.code : undefined;
}

/** The server check of a TLS connection to slicerd, in place of the host
 * name check, as the Go Clerk makes it: after the chain is verified against
 * the CA, the certificate must name a slicerd Distributor or Backup
 * (spiffe://slicerd/distributor/NODE, spiffe://slicerd/backup/NODE). A
 * certificate the same CA issued to a task or a client is refused, so a
 * task cannot pose as a Distributor. */
export function agentIdentity(_host: string, cert: PeerCertificate): Error | undefined {
  const sans = (cert.subjectaltname ?? "").split(", ");
  if (sans.some((s) => /^URI:spiffe:\/\/slicerd\/(distributor|backup)\/[^/]+$/.test(s))) return undefined;
  return new Error(
    `slicerd Clerk: the server's certificate names no slicerd Distributor or Backup (spiffe://slicerd/distributor/NODE or spiffe://slicerd/backup/NODE); its names: ${cert.subjectaltname || "none"}`,
  );
}
