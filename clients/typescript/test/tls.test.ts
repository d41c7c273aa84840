// The Clerk over TLS: it checks the server's certificate against the CA
// it is given and for a slicerd Distributor's identity, and presents its
// client certificate.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { AssignmentSchema, DistributorService, WatchAssignmentResponseSchema } from "../src/gen/slicer/v1/slicer_pb.js";
import { Clerk, KEY_SPACE_END } from "../src/index.js";

function hasOpenSSL(): boolean {
  try {
    execFileSync("openssl", ["version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

const skip = hasOpenSSL() ? false : "openssl is not installed: no certificates for the TLS test";

describe("Clerk over TLS", { skip }, () => {
  let dir: string;
  const servers: http2.Http2SecureServer[] = [];
  const sessions = new Set<http2.ServerHttp2Session>();
  let addr: string; // a Distributor
  let impostor: string; // a task with a certificate from the same CA
  const pem = (name: string) => fs.readFileSync(path.join(dir, name));

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "clerk-tls-"));
    const ssl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test CA");
    fs.writeFileSync(path.join(dir, "server.ext"), "subjectAltName=IP:127.0.0.1,URI:spiffe://slicerd/distributor/node-1\nextendedKeyUsage=serverAuth\n");
    fs.writeFileSync(path.join(dir, "task.ext"), "subjectAltName=IP:127.0.0.1,URI:spiffe://slicerd/task/kv/kv-0\nextendedKeyUsage=serverAuth,clientAuth\n");
    fs.writeFileSync(path.join(dir, "client.ext"), "subjectAltName=URI:spiffe://slicerd/client/kv\nextendedKeyUsage=clientAuth\n");
    for (const name of ["server", "task", "client"]) {
      ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
      ssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${name}.pem`, "-days", "1", "-extfile", `${name}.ext`);
    }
    const serve = async (name: string): Promise<string> => {
      const server = http2.createSecureServer(
        { key: pem(`${name}.key`), cert: pem(`${name}.pem`), ca: pem("ca.pem"), requestCert: true, rejectUnauthorized: true },
        connectNodeAdapter({
          routes: (router) =>
            router.service(DistributorService, {
              async *watchAssignment(_req, ctx) {
                yield create(WatchAssignmentResponseSchema, {
                  assignment: create(AssignmentSchema, {
                    job: "kv",
                    generation: 1n,
                    incarnation: "inc-a",
                    tasks: [{ name: "kv-0", address: "10.0.0.1:80" }],
                    slices: [{ start: 0n, end: KEY_SPACE_END, tasks: ["kv-0"] }],
                  }),
                });
                await new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true }));
              },
            }),
        }),
      );
      server.on("session", (s) => {
        sessions.add(s);
        s.on("close", () => sessions.delete(s));
      });
      server.on("tlsClientError", () => {}); // the refused clients below
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      servers.push(server);
      return `127.0.0.1:${(server.address() as AddressInfo).port}`;
    };
    addr = await serve("server");
    impostor = await serve("task");
  });

  after(async () => {
    for (const s of sessions) s.destroy();
    for (const server of servers) await new Promise((r) => server.close(r));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("streams with the CA and a client certificate", async () => {
    const clerk = new Clerk({ job: "kv", addrs: [addr], tls: { ca: pem("ca.pem"), cert: pem("client.pem"), key: pem("client.key") } }).start();
    try {
      await clerk.ready(10_000);
      assert.equal(clerk.lookup("k")?.task, "kv-0");
    } finally {
      await clerk.close();
    }
  });

  for (const [what, server, tls] of [
    ["without a client certificate", () => addr, () => ({ ca: pem("ca.pem") })],
    ["when the server's certificate is not signed by its CA", () => addr, () => ({ ca: pem("client.pem"), cert: pem("client.pem"), key: pem("client.key") })],
    ["from a task whose certificate the same CA signed", () => impostor, () => ({ ca: pem("ca.pem"), cert: pem("client.pem"), key: pem("client.key") })],
  ] as const) {
    it(`gets nothing ${what}`, async () => {
      const clerk = new Clerk({ job: "kv", addrs: [server()], tls: tls(), minBackoffMs: 20, maxBackoffMs: 50 }).start();
      try {
        await assert.rejects(clerk.ready(1500), /no assignment/);
        assert.equal(clerk.assignment, undefined);
      } finally {
        await clerk.close();
      }
    });
  }
});
