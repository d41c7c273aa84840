// End to end against the real binaries: one slicerd node and three
// kvserver tasks of job kv. The Clerk follows the assignment as tasks die
// and while slicerd is down and restarted on its data directory; a Clerk
// started from the cache file while slicerd is down routes at once.
// scripts/test.sh builds the binaries and sets SLICERD_BIN and
// SLICERD_KVSERVER_BIN; without them the test is skipped (and fails in CI).

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { DistributorService } from "../src/gen/slicer/v1/slicer_pb.js";
import { Clerk, type Assignment } from "../src/index.js";
import { sleep, waitUntil } from "./helpers.js";

const slicerdBin = process.env.SLICERD_BIN;
const kvBin = process.env.SLICERD_KVSERVER_BIN;
const missing = !slicerdBin || !kvBin;
const skip = missing && !process.env.CI ? "SLICERD_BIN and SLICERD_KVSERVER_BIN are not set; scripts/test.sh builds slicerd and kvserver and sets them" : false;

/** A started process and the lines it printed. */
class Proc {
  readonly lines: string[] = [];
  private readonly child: ChildProcess;
  private readonly waiters = new Set<() => void>();
  readonly exited: Promise<void>;

  constructor(readonly name: string, bin: string, args: string[]) {
    this.child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env } });
    let partial = "";
    const onData = (chunk: Buffer) => {
      partial += chunk.toString("utf8");
      const parts = partial.split("\n");
      partial = parts.pop()!;
      this.lines.push(...parts);
      for (const w of this.waiters) w();
    };
    this.child.stdout!.on("data", onData);
    this.child.stderr!.on("data", onData);
    this.exited = new Promise((resolve) => this.child.once("exit", () => resolve()));
    procs.add(this);
  }

  /** The first line that contains text, waiting up to timeoutMs. */
  waitLine(text: string, timeoutMs: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const line = this.lines.find((l) => l.includes(text));
        if (line !== undefined) {
          clearTimeout(timer);
          this.waiters.delete(check);
          resolve(line);
        }
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`${this.name} printed no line with ${JSON.stringify(text)} within ${timeoutMs} ms; it printed:\n${this.lines.slice(-30).join("\n")}`));
      }, timeoutMs);
      this.waiters.add(check);
      check();
      this.exited.then(() => setTimeout(check, 0));
    });
  }

  async kill(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
    await this.exited;
    procs.delete(this);
  }
}

const procs = new Set<Proc>();

/** A loopback address nothing listens on now, for a node that must come back on it. */
function freeAddr(): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(`127.0.0.1:${port}`));
    });
  });
}

async function startSlicerd(args: string[]): Promise<{ proc: Proc; rpcAddr: string; gossipAddr: string }> {
  const proc = new Proc("slicerd", slicerdBin!, [
    "--node-name", "node-1",
    "--gossip-profile", "local",
    "--rebalance-delay", "100ms",
    "--startup-grace", "300ms",
    "--log-format", "json",
    ...args,
  ]);
  const line = await proc.waitLine(`"msg":"slicerd started"`, 30_000);
  const rec = JSON.parse(line) as { rpc_addr?: string; gossip_addr?: string };
  assert.ok(rec.rpc_addr && rec.gossip_addr, `no addresses in ${line}`);
  return { proc, rpcAddr: rec.rpc_addr, gossipAddr: rec.gossip_addr };
}

async function startKV(task: string, join: string): Promise<{ proc: Proc; task: string; addr: string }> {
  const proc = new Proc(task, kvBin!, ["-job", "kv", "-task", task, "-addr", "127.0.0.1:0", "-gossip-addr", "127.0.0.1:0", "-gossip-profile", "local", "-join", join]);
  const line = await proc.waitLine(`kvserver task=${task}`, 30_000);
  const addr = line.split(/\s+/).find((f) => f.startsWith("addr="))?.slice("addr=".length);
  assert.ok(addr, `no addr in ${line}`);
  return { proc, task, addr };
}

const keys = Array.from({ length: 1000 }, (_, i) => `key-${i}`);

describe("end to end: the Clerk against slicerd and kvserver", { skip }, () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "slicerd-clerk-e2e-"));
  let clerk: Clerk | undefined;
  after(async () => {
    await clerk?.close();
    await Promise.all([...procs].map((p) => p.kill()));
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it("follows task failures and a restart of slicerd, routing throughout", { timeout: 240_000 }, async (t) => {
    assert.ok(!missing, "SLICERD_BIN and SLICERD_KVSERVER_BIN must be set in CI (scripts/test.sh sets them)");
    const rpc = await freeAddr();
    const gossip = await freeAddr();
    const nodeArgs = ["--rpc-addr", rpc, "--gossip-addr", gossip, "--data-dir", path.join(dataDir, "node-1")];
    let node = await startSlicerd(nodeArgs);
    const tasks = new Map<string, string>(); // live task name → address
    const kv = new Map<string, Proc>();
    for (const name of ["kv-0", "kv-1", "kv-2"]) {
      const t = await startKV(name, node.gossipAddr);
      tasks.set(t.task, t.addr);
      kv.set(t.task, t.proc);
    }

    const installed: Assignment[] = [];
    const cacheFile = path.join(dataDir, "clerk.cache");
    clerk = new Clerk({ job: "kv", addrs: [node.rpcAddr], cacheFile, minBackoffMs: 50, maxBackoffMs: 1000, onAssignment: (a) => installed.push(a) });
    clerk.start();
    const c = clerk;

    const allRouteLive = () =>
      keys.every((k) => {
        const r = c.lookup(k);
        return r !== undefined && tasks.get(r.task) === r.address;
      });
    const names = () => (c.assignment?.tasks.map((t) => t.name) ?? []).join(",");

    await waitUntil(60_000, "all three tasks in the assignment and every key routed to a live task", () => names() === "kv-0,kv-1,kv-2" && allRouteLive());

    await kv.get("kv-1")!.kill();
    tasks.delete("kv-1");
    await waitUntil(60_000, "an assignment without kv-1 that routes every key to a live task", () => names() === "kv-0,kv-2" && allRouteLive());

    // slicerd goes down: the Clerk keeps routing by what it holds.
    await node.proc.kill();
    const held = c.assignment;
    for (let i = 0; i < 10; i++) {
      await sleep(200);
      assert.equal(c.assignment, held, "the held assignment changed while slicerd was down");
      assert.ok(allRouteLive(), "a key did not route to a live task while slicerd was down");
    }

    // A Clerk started now, with a copy of the first one's cache file,
    // routes by the cached assignment while slicerd is still down.
    await waitUntil(10_000, "the cache file to hold the held generation", () =>
      fs.existsSync(cacheFile) && fs.readFileSync(cacheFile, "utf8").includes(`"generation":"${held!.generation}"`));
    const copy = path.join(dataDir, "clerk-copy.cache");
    fs.copyFileSync(cacheFile, copy);
    const restarted = new Clerk({ job: "kv", addrs: [node.rpcAddr], cacheFile: copy });
    assert.equal(restarted.generation, held!.generation);
    assert.equal(restarted.assignment?.incarnation, held!.incarnation);
    assert.ok(keys.every((k) => {
      const r = restarted.lookup(k);
      return r !== undefined && tasks.get(r.task) === r.address;
    }), "the Clerk started from the cache file did not route every key to a live task");
    await restarted.close();

    // slicerd comes back on its data directory and addresses; the tasks
    // rejoin through gossip and the Clerk resumes.
    node = await startSlicerd(nodeArgs);
    const direct = createClient(DistributorService, createGrpcTransport({ baseUrl: `http://${node.rpcAddr}` }));
    const serverVersion = async () => {
      try {
        const a = (await direct.getAssignment({ job: "kv" }, { timeoutMs: 2000 })).assignment;
        return a ? `${a.incarnation}/${a.generation}` : "";
      } catch {
        return "";
      }
    };
    await waitUntil(60_000, "the Clerk to hold slicerd's current assignment after the restart", async () => {
      const v = await serverVersion();
      return v !== "" && v === `${c.assignment?.incarnation}/${c.generation}` && allRouteLive();
    });

    // A new task after the restart: the resumed stream brings it.
    const t3 = await startKV("kv-3", node.gossipAddr);
    tasks.set(t3.task, t3.addr);
    kv.set(t3.task, t3.proc);
    await waitUntil(60_000, "kv-3 in the assignment and every key routed to a live task", () => names() === "kv-0,kv-2,kv-3" && allRouteLive());

    // No generation of an incarnation was installed twice or out of order.
    const seen = new Set<string>();
    for (const [i, a] of installed.entries()) {
      const v = `${a.incarnation}/${a.generation}`;
      assert.ok(!seen.has(v), `installed ${v} twice`);
      seen.add(v);
      const prev = installed[i - 1];
      if (prev && prev.incarnation === a.incarnation) assert.ok(a.generation > prev.generation, `installed ${v} after ${prev.incarnation}/${prev.generation}`);
    }
    t.diagnostic(`installed: ${installed.map((a) => `${a.incarnation}/${a.generation} (${a.tasks.map((x) => x.name).join(" ")})`).join(", ")}`);
    const restartAt = installed.indexOf(held!);
    assert.ok(restartAt >= 0 && installed.length > restartAt + 1, "nothing was installed after the restart");
  });
});
