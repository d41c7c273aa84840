// The Clerk against real Connect/gRPC servers: arguments, routing, the
// cache file, NOT_FOUND, the order of servers and the Backup fallback, and
// that close() stops everything.

import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  AssignmentSchema,
  BackupService,
  DistributorService,
  WatchAssignmentResponseSchema,
  type WatchAssignmentRequest,
  type WatchAssignmentResponse,
} from "../src/gen/slicer/v1/slicer_pb.js";
import { Clerk, InvalidConfigError, KEY_SPACE_END, rocksteadier, sliceKey, subsetOf, type Assignment } from "../src/index.js";
import { Queue, serve, sleep, waitUntil, type Server } from "./helpers.js";

const half = KEY_SPACE_END / 2n;

function message(generation: bigint, incarnation = "inc-a"): WatchAssignmentResponse {
  return create(WatchAssignmentResponseSchema, {
    assignment: create(AssignmentSchema, {
      job: "kv",
      generation,
      incarnation,
      tasks: [
        { name: "kv-0", address: "10.0.0.1:80" },
        { name: "kv-1", address: "10.0.0.2:80" },
        { name: "kv-2", address: "10.0.0.3:80" },
      ],
      slices: [
        { start: 0n, end: half, tasks: ["kv-0", "kv-1"] },
        { start: half, end: KEY_SPACE_END, tasks: ["kv-2"] },
      ],
    }),
  });
}

/** A server of DistributorService or BackupService whose watches run script. */
async function scripted(
  service: typeof DistributorService | typeof BackupService,
  script: (req: WatchAssignmentRequest, call: number, signal: AbortSignal) => AsyncIterable<WatchAssignmentResponse>,
): Promise<Server & { requests: Queue<WatchAssignmentRequest> }> {
  const requests = new Queue<WatchAssignmentRequest>();
  let calls = 0;
  const server = await serve((router) =>
    router.service(service, {
      watchAssignment(req, ctx) {
        requests.push(req);
        return script(req, calls++, ctx.signal);
      },
    }),
  );
  return Object.assign(server, { requests });
}

const untilAborted = (signal: AbortSignal) => new Promise((r) => signal.addEventListener("abort", r, { once: true }));

/** An address nothing listens on. */
async function deadAddr(): Promise<string> {
  const s = await serve(() => {});
  await s.close();
  return s.addr;
}

describe("Clerk arguments", () => {
  const ok = { job: "kv", addrs: ["127.0.0.1:1"] };
  const bad: [string, unknown][] = [
    ["no options", undefined],
    ["no job", { addrs: ["127.0.0.1:1"] }],
    ["a bad job name", { ...ok, job: "Bad Job" }],
    ["no address", { job: "kv" }],
    ["addrs not an array", { job: "kv", addrs: "127.0.0.1:1" }],
    ["a negative backoff", { ...ok, minBackoffMs: -1 }],
    ["max backoff below min", { ...ok, minBackoffMs: 100, maxBackoffMs: 10 }],
    ["a fractional subset size", { ...ok, subsetSize: 1.5 }],
    ["a frontend that is not a BigInt", { ...ok, frontend: 3 }],
    ["a token with a newline", { ...ok, token: "a\nb" }],
    ["a cache file in a missing directory", { ...ok, cacheFile: "/nonexistent-dir/x/cache.json" }],
  ];
  for (const [what, opts] of bad) {
    it(`refuses ${what}`, () => assert.throws(() => new Clerk(opts as never), InvalidConfigError));
  }
  it("refuses a key that is neither a string nor bytes, and skip given as a string", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "clerk-"));
    try {
      const file = path.join(dir, "cache.json");
      await cacheWith(file, message(1n));
      const clerk = new Clerk({ ...ok, cacheFile: file });
      assert.throws(() => clerk.lookup(42 as never), TypeError);
      assert.throws(() => clerk.lookup("k", { skip: "kv-0" as never }), TypeError);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** Writes a cache file holding m's assignment, through a Clerk that received it. */
async function cacheWith(file: string, m: WatchAssignmentResponse): Promise<void> {
  const server = await scripted(DistributorService, async function* (_req, _call, signal) {
    yield m;
    await untilAborted(signal);
  });
  const clerk = new Clerk({ job: "kv", addrs: [server.addr], cacheFile: file }).start();
  await clerk.ready(10_000);
  await clerk.close();
  await server.close();
}

describe("Clerk", () => {
  let dir: string;
  before(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), "clerk-"))));
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it("routes a key to a random replica of its slice and skips failed ones", async () => {
    const file = path.join(dir, "route.json");
    await cacheWith(file, message(3n));
    // The cache file is its user's alone, as the Go Clerk's is.
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    const clerk = new Clerk({ job: "kv", addrs: ["127.0.0.1:1"], cacheFile: file });
    // A key of the first slice, served by kv-0 and kv-1.
    let key = "";
    for (let i = 0; ; i++) {
      if (sliceKey(`k${i}`) < half) {
        key = `k${i}`;
        break;
      }
    }
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) seen.add(clerk.lookup(key)!.task);
    assert.deepEqual([...seen].sort(), ["kv-0", "kv-1"]);
    for (let i = 0; i < 50; i++) assert.deepEqual(clerk.lookup(key, { skip: ["kv-0"] }), { task: "kv-1", address: "10.0.0.2:80" });
    assert.equal(clerk.lookup(key, { skip: ["10.0.0.1:80"] })?.task, "kv-1");
    assert.equal(clerk.lookup(key, { skip: new Set(["kv-0", "kv-1"]) }), undefined);
    assert.deepEqual(clerk.tasksFor(key)?.map((t) => t.name), ["kv-0", "kv-1"]);
  });

  it("routes by the cache file before slicerd answers, and watches from nothing so the server sends its current assignment", async () => {
    const file = path.join(dir, "restart.json");
    await cacheWith(file, message(7n));
    const server = await scripted(DistributorService, async function* (_req, _call, signal) {
      yield message(8n);
      await untilAborted(signal);
    });
    const seen: bigint[] = [];
    const clerk = new Clerk({ job: "kv", addrs: [server.addr], cacheFile: file, onAssignment: (a) => seen.push(a.generation) });
    try {
      assert.equal(clerk.generation, 7n);
      assert.equal(clerk.assignment?.incarnation, "inc-a");
      assert.ok(clerk.lookup("x"));
      clerk.start();
      const first = await server.requests.next(10_000, "the first watch");
      assert.equal(first.knownGeneration, 0n);
      assert.equal(first.knownIncarnation, "");
      await waitUntil(10_000, "generation 8", () => clerk.generation === 8n);
      assert.deepEqual(seen, [7n, 8n]);
    } finally {
      await clerk.close();
      await server.close();
    }
    const text = fs.readFileSync(file, "utf8");
    assert.match(text, /"generation":"8"/);
    assert.match(text, /"incarnation":"inc-a"/);
  });

  for (const [what, damage] of [
    ["a truncated", (t: string) => t.slice(0, t.length / 2)],
    ["an altered", (t: string) => t.replace('"10.0.0.1:80"', '"10.6.6.6:80"')],
    ["another job's", (t: string) => t.replaceAll('"kv"', '"other"')],
    ["an empty", () => ""],
  ] as const) {
    it(`treats ${what} cache file as absent`, async () => {
      const file = path.join(dir, `damaged-${what.replace(/\W/g, "")}.json`);
      await cacheWith(file, message(2n));
      fs.writeFileSync(file, damage(fs.readFileSync(file, "utf8")));
      const clerk = new Clerk({ job: "kv", addrs: ["127.0.0.1:1"], cacheFile: file });
      assert.equal(clerk.assignment, undefined);
      assert.equal(clerk.lookup("x"), undefined);
    });
  }

  it("retries NOT_FOUND until the job exists", async () => {
    const server = await scripted(DistributorService, async function* (_req, call, signal) {
      if (call < 3) throw new ConnectError("job kv not found", Code.NotFound);
      yield message(1n);
      await untilAborted(signal);
    });
    const clerk = new Clerk({ job: "kv", addrs: [server.addr], minBackoffMs: 5, maxBackoffMs: 20 }).start();
    try {
      await clerk.ready(10_000);
      assert.equal(clerk.generation, 1n);
    } finally {
      await clerk.close();
      await server.close();
    }
  });

  it("backs off between rounds instead of retrying in a tight loop", async () => {
    let calls = 0;
    const server = await scripted(DistributorService, async function* () {
      calls++;
      throw new ConnectError("down", Code.Unavailable);
    });
    const clerk = new Clerk({ job: "kv", addrs: [server.addr], minBackoffMs: 50, maxBackoffMs: 200 }).start();
    try {
      await sleep(1000);
      // Waits of at least 25, 50, 100, 100, ... ms: at most about a dozen calls in a second.
      assert.ok(calls >= 2 && calls <= 14, `${calls} calls in a second`);
    } finally {
      await clerk.close();
      await server.close();
    }
  });

  it("tries its preferred Distributors in Rocksteadier's order, then the others, then the Backups", async () => {
    const dists = Array.from({ length: 7 }, (_, i) => `10.1.0.${i}:7000`);
    const backups = ["10.2.0.1:7000", "10.2.0.2:7000"];
    const clerk = new Clerk({ job: "kv", addrs: dists, backupAddrs: backups, frontend: 12n });
    const sorted = [...dists].sort();
    const pref = rocksteadier(12n, sorted.length, 3).map((i) => sorted[i]);
    const plan = clerk.plan(dists, backups);
    assert.deepEqual(plan.slice(0, 3).map((t) => t.addr), pref);
    assert.ok(plan.slice(0, 3).every((t) => !t.fallback && !t.backup));
    assert.deepEqual(plan.slice(3, 7).map((t) => t.addr).sort(), sorted.filter((a) => !pref.includes(a)));
    assert.ok(plan.slice(3, 7).every((t) => t.fallback && !t.backup));
    assert.deepEqual(plan.slice(7).map((t) => t.addr).sort(), backups);
    assert.ok(plan.slice(7).every((t) => t.fallback && t.backup));
    // The same number picks the same Distributors in another Clerk.
    const again = new Clerk({ job: "kv", addrs: dists, frontend: 12n }).plan(dists, []);
    assert.deepEqual(again.slice(0, 3).map((t) => t.addr), pref);
  });

  it("falls back to a Backup when no Distributor answers, and ends that stream after backupRecheckMs", async () => {
    const backup = await scripted(BackupService, async function* (_req, _call, signal) {
      yield message(4n);
      await untilAborted(signal);
    });
    const clerk = new Clerk({ job: "kv", addrs: [await deadAddr()], backupAddrs: [backup.addr], minBackoffMs: 5, maxBackoffMs: 20, backupRecheckMs: 300 }).start();
    try {
      await backup.requests.next(10_000, "a watch on the Backup");
      await waitUntil(10_000, "the Backup's assignment", () => clerk.generation === 4n);
      // The stream ends after the recheck and the Clerk tries its
      // Distributor again, then comes back to the Backup.
      const again = await backup.requests.next(10_000, "a second watch on the Backup");
      assert.equal(again.knownGeneration, 4n);
      assert.equal(again.knownIncarnation, "inc-a");
    } finally {
      await clerk.close();
      await backup.close();
    }
  });

  it("moves an open stream to its first choice when resolveNow reports a change of its subset", async () => {
    const streamFor = () =>
      scripted(DistributorService, async function* (_req, _call, signal) {
        yield message(1n);
        await untilAborted(signal);
      });
    const a = await streamFor();
    const b = await streamFor();
    let frontend = 0n;
    while (subsetOf(frontend, 3, [a.addr, b.addr]).pref[0] !== a.addr) frontend++;
    let known = [b.addr];
    const clerk = new Clerk({ job: "kv", resolver: () => ({ distributors: known, backups: [] }), frontend, minBackoffMs: 5, maxBackoffMs: 20 }).start();
    try {
      await b.requests.next(10_000, "a watch on the only Distributor known");
      await clerk.ready(10_000);
      known = [a.addr, b.addr];
      clerk.resolveNow();
      const moved = await a.requests.next(10_000, "a watch on the first choice");
      assert.equal(moved.knownGeneration, 1n);
    } finally {
      await clerk.close();
      await a.close();
      await b.close();
    }
  });

  it("sends the bearer token", async () => {
    const headers = new Queue<string | null>();
    const server = await serve((router) =>
      router.service(DistributorService, {
        async *watchAssignment(_req, ctx) {
          headers.push(ctx.requestHeader.get("authorization"));
          yield message(1n);
          await untilAborted(ctx.signal);
        },
      }),
    );
    const clerk = new Clerk({ job: "kv", addrs: [server.addr], token: "s3cret" }).start();
    try {
      assert.equal(await headers.next(10_000, "a watch"), "Bearer s3cret");
    } finally {
      await clerk.close();
      await server.close();
    }
  });

  it("leaves no timer or connection behind after close()", async () => {
    const server = await scripted(DistributorService, async function* (_req, _call, signal) {
      yield message(1n);
      await untilAborted(signal);
    });
    const count = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout" || r === "TCPWrap").length;
    const before = count();
    const clerk = new Clerk({ job: "kv", addrs: [server.addr], backupAddrs: [server.addr] }).start();
    await clerk.ready(10_000);
    await clerk.close();
    await server.close();
    await sleep(50);
    assert.equal(count(), before, `resources: ${process.getActiveResourcesInfo().join(", ")}`);
    // A Clerk closed before its first assignment rejects ready().
    const never = new Clerk({ job: "kv", addrs: [server.addr] });
    const ready = never.ready();
    await never.close();
    await assert.rejects(ready, /closed before the first assignment/);
  });

  it("keeps a lower or equal generation of the held incarnation out, and takes a reset", async () => {
    const installed: string[] = [];
    const server = await scripted(DistributorService, async function* (_req, _call, signal) {
      yield message(5n);
      yield message(4n);
      yield message(5n);
      yield message(2n, "inc-b");
      await untilAborted(signal);
    });
    const clerk = new Clerk({ job: "kv", addrs: [server.addr] });
    clerk.on("assignment", (a: Assignment) => installed.push(`${a.incarnation}/${a.generation}`));
    clerk.start();
    try {
      await waitUntil(10_000, "the reset", () => clerk.assignment?.incarnation === "inc-b");
      assert.deepEqual(installed, ["inc-a/5", "inc-b/2"]);
    } finally {
      await clerk.close();
      await server.close();
    }
  });
});
