// A hostile or broken Distributor: one message whose envelope declares
// gigabytes. A real assignment is a few megabytes (the Go cache file
// refuses one above 1 GiB, the Python Clerk refuses to receive one above
// 1 GiB); the Clerk must not allocate or buffer what a server declares.

import assert from "node:assert/strict";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { describe, it } from "node:test";
import { Clerk } from "../src/index.js";
import { sleep, waitUntil } from "./helpers.js";

describe("hostile Distributor", () => {
  it("a message declared as 4 GiB is refused at its length prefix, not allocated or buffered", { timeout: 120_000 }, async () => {
    const declared = 0xfffffff0;
    const send = 96 << 20;
    let sent = 0;
    let dropped = false;
    let finished = false;
    const server = http2.createServer();
    const sessions = new Set<http2.ServerHttp2Session>();
    server.on("session", (s) => {
      sessions.add(s);
      s.on("close", () => sessions.delete(s));
    });
    server.on("stream", (stream, headers) => {
      if (headers[":path"] !== "/slicer.v1.DistributorService/WatchAssignment") {
        stream.respond({ ":status": 404 });
        stream.end();
        return;
      }
      stream.on("close", () => (dropped = true));
      stream.on("error", () => (dropped = true));
      stream.resume(); // the request
      stream.respond({ ":status": 200, "content-type": "application/grpc+proto" });
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(declared, 1);
      stream.write(prefix);
      const chunk = Buffer.alloc(1 << 20);
      const pump = () => {
        while (sent < send && !dropped) {
          sent += chunk.length;
          if (!stream.write(chunk)) {
            stream.once("drain", pump);
            return;
          }
        }
        finished = true;
      };
      pump();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const addr = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    const before = process.memoryUsage();
    const clerk = new Clerk({ job: "kv", addrs: [addr], subsetSize: 0, minBackoffMs: 1000, maxBackoffMs: 2000 }).start();
    let peak = 0;
    try {
      const t0 = Date.now();
      while (!finished && !dropped && Date.now() - t0 < 60_000) {
        peak = Math.max(peak, process.memoryUsage().arrayBuffers - before.arrayBuffers);
        await sleep(20);
      }
      await sleep(300);
      peak = Math.max(peak, process.memoryUsage().arrayBuffers - before.arrayBuffers);
      const msg = `server sent ${sent >> 20} MiB of a message declared as ${declared} bytes; client dropped the stream: ${dropped}; ` +
        `arrayBuffers grew by up to ${Math.round(peak / 2 ** 20)} MiB`;
      console.log(msg);
      assert.ok(dropped && sent < send && peak < 64 * 2 ** 20, `the Clerk took a message declared as ${declared} bytes: ${msg}`);
    } finally {
      await clerk.close();
      for (const s of sessions) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
