// Heartbeats (docs/api.md, "Heartbeats"): a Distributor that announced
// them and then goes silent on its stream while its connection stays up
// (HTTP/2 pings answered) is left for the next server.

import assert from "node:assert/strict";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { describe, it } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { AssignmentSchema, DistributorService, WatchAssignmentResponseSchema } from "../src/gen/slicer/v1/slicer_pb.js";
import { Clerk, KEY_SPACE_END } from "../src/index.js";
import { serve, sleep, waitUntil } from "./helpers.js";

function message(generation: bigint) {
  return create(WatchAssignmentResponseSchema, {
    assignment: create(AssignmentSchema, {
      job: "kv",
      generation,
      incarnation: "inc-a",
      tasks: [{ name: "kv-0", address: "10.0.0.1:80" }],
      slices: [{ start: 0n, end: KEY_SPACE_END, tasks: ["kv-0"] }],
    }),
  });
}

/** One gRPC message: flags, length, then the bytes. */
function envelope(b: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + b.length);
  out.writeUInt32BE(b.length, 1);
  out.set(b, 5);
  return out;
}

/** A Distributor (gRPC over h2c) that announces heartbeats every 50 ms to
 * a client that asks, sends first, and then nothing while it holds the
 * stream open. */
async function silentDistributor(first: Buffer) {
  const server = http2.createServer();
  const sessions = new Set<http2.ServerHttp2Session>();
  let opens = 0;
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  server.on("stream", (stream, headers) => {
    stream.on("error", () => {});
    if (headers[":path"] !== "/slicer.v1.DistributorService/WatchAssignment") {
      stream.respond({ ":status": 404 });
      stream.end();
      return;
    }
    opens++;
    stream.resume(); // the request
    const announce = headers["slicerd-heartbeat"] === "1" ? { "slicerd-heartbeat-interval": "50" } : {};
    stream.respond({ ":status": 200, "content-type": "application/grpc+proto", ...announce });
    stream.write(first);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    addr: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    opens: () => opens,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sessions) s.destroy();
        server.close(() => resolve());
      }),
  };
}

describe("heartbeats", () => {
  const cases: [string, Buffer][] = [
    // A length prefix promising 100 bytes, then 10 of them.
    ["mid-message", envelope(new Uint8Array(100)).subarray(0, 15)],
    ["after a generation", envelope(toBinary(WatchAssignmentResponseSchema, message(1n)))],
  ];
  for (const [what, first] of cases) {
    it(`a Distributor silent ${what} after announcing heartbeats is left for the next`, { timeout: 60_000 }, async () => {
      const silent = await silentDistributor(first);
      const next = await serve((router) =>
        router.service(DistributorService, {
          async *watchAssignment(_req, ctx) {
            yield message(2n);
            await new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true }));
          },
        }),
      );
      let both = false;
      const clerk = new Clerk({
        job: "kv",
        subsetSize: 0,
        minBackoffMs: 5,
        maxBackoffMs: 50,
        // The silent Distributor alone until its stream is open, so the
        // Clerk is on it first.
        resolver: () => ({ distributors: both ? [silent.addr, next.addr] : [silent.addr], backups: [] }),
      }).start();
      try {
        await waitUntil(30_000, "a stream on the silent Distributor", () => silent.opens() > 0);
        both = true;
        await waitUntil(30_000, "generation 2 from the next Distributor", () => clerk.generation === 2n);
        assert.equal(clerk.generation, 2n);
      } finally {
        await clerk.close();
        await silent.close();
        await next.close();
      }
    });
  }

  it("a Distributor that sends heartbeats keeps the stream however long no generation goes out", { timeout: 60_000 }, async () => {
    let opens = 0;
    let beats = 0;
    const server = await serve((router) =>
      router.service(DistributorService, {
        async *watchAssignment(_req, ctx) {
          opens++;
          const asked = ctx.requestHeader.get("slicerd-heartbeat") === "1";
          if (asked) ctx.responseHeader.set("slicerd-heartbeat-interval", "200");
          yield message(1n);
          // Heartbeats far more often than announced: the stream is never
          // silent for four intervals, however the test is scheduled.
          while (asked && !ctx.signal.aborted) {
            await sleep(5);
            yield create(WatchAssignmentResponseSchema, {});
            beats++;
          }
          await new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true }));
        },
      }),
    );
    const clerk = new Clerk({ job: "kv", addrs: [server.addr], subsetSize: 0 }).start();
    try {
      await clerk.ready(30_000);
      // Twice four announced intervals at least: a heartbeat every 5 ms or
      // more makes at most 40 in 200 ms.
      await waitUntil(30_000, "320 heartbeats", () => beats >= 320);
      assert.equal(opens, 1, "the Clerk dropped a stream that sent heartbeats");
      assert.equal(clerk.generation, 1n);
    } finally {
      await clerk.close();
      await server.close();
    }
  });
});
