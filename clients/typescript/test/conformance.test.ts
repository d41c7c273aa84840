// The language-neutral conformance vectors in api/conformance
// (docs/client-contract.md): slice keys, lookups, and WatchAssignment
// streams played from a real Connect/gRPC server.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  AssignmentSchema,
  DistributorService,
  WatchAssignmentResponseSchema,
  type WatchAssignmentRequest,
  type WatchAssignmentResponse,
} from "../src/gen/slicer/v1/slicer_pb.js";
import { Clerk, fromProto, sliceKey, Table } from "../src/index.js";
import { conformanceDir, Queue, readJSON, serve } from "./helpers.js";

interface HashFile {
  cases: { key: string; text?: string; slice_key: string }[];
}
interface LookupFile {
  cases: {
    name: string;
    assignment: JsonValue;
    lookups: { key?: string; slice_key: string; tasks: string[]; addresses: string[] }[];
  }[];
}
interface StreamState {
  installed_generation: string;
  installed_incarnation: string;
  resume_known_generation: string;
  resume_known_incarnation: string;
}
interface StreamFile {
  cases: { name: string; streams: { messages: JsonValue[]; then: StreamState }[] }[];
}

const b64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));

describe("conformance: hash.json", () => {
  const file = readJSON<HashFile>(new URL("hash.json", conformanceDir));
  it("has cases", () => assert.ok(file.cases.length > 0));
  for (const c of file.cases) {
    it(`slice key of ${c.text !== undefined ? JSON.stringify(c.text.slice(0, 24)) : c.key.slice(0, 24)}`, () => {
      assert.equal(sliceKey(b64(c.key)).toString(), c.slice_key);
      if (c.text !== undefined) assert.equal(sliceKey(c.text).toString(), c.slice_key);
    });
  }
});

describe("conformance: lookup.json", () => {
  const file = readJSON<LookupFile>(new URL("lookup.json", conformanceDir));
  it("has cases", () => assert.ok(file.cases.length > 0));
  for (const c of file.cases) {
    it(c.name, () => {
      const table = new Table(fromProto(fromJson(AssignmentSchema, c.assignment)));
      for (const l of c.lookups) {
        const h = l.key !== undefined ? sliceKey(b64(l.key)) : BigInt(l.slice_key);
        assert.equal(h.toString(), l.slice_key);
        const tasks = table.slice(table.find(h));
        assert.deepEqual(tasks.map((t) => t.name), l.tasks, `tasks of slice key ${l.slice_key}`);
        assert.deepEqual(tasks.map((t) => t.address), l.addresses, `addresses of slice key ${l.slice_key}`);
      }
    });
  }
});

describe("conformance: stream.json", () => {
  const file = readJSON<StreamFile>(new URL("stream.json", conformanceDir));
  it("has cases", () => assert.ok(file.cases.length > 0));
  for (const c of file.cases) {
    it(c.name, async () => {
      const streams: WatchAssignmentResponse[][] = c.streams.map((s) => s.messages.map((m) => fromJson(WatchAssignmentResponseSchema, m)));
      const requests = new Queue<WatchAssignmentRequest>();
      let next = 0;
      const server = await serve((router) =>
        router.service(DistributorService, {
          async *watchAssignment(req, ctx) {
            requests.push(req);
            if (next >= streams.length) {
              await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
              return;
            }
            for (const m of streams[next++]) yield m;
            throw new ConnectError("the stream ends; the client watches again", Code.Unavailable);
          },
        }),
      );
      const clerk = new Clerk({ job: "kv", addrs: [server.addr], subsetSize: 0, minBackoffMs: 1, maxBackoffMs: 5 }).start();
      try {
        const first = await requests.next(30_000, "the first watch");
        assert.equal(first.job, "kv");
        assert.equal(first.deltaVersion, 1);
        assert.equal(first.knownGeneration, 0n, "a fresh client's known generation");
        assert.equal(first.knownIncarnation, "", "a fresh client's known incarnation");
        for (const [i, s] of c.streams.entries()) {
          // The client watches again only once it has handled the whole
          // stream: what it holds now is what it must.
          const resumed = await requests.next(30_000, `the watch after stream ${i}`);
          const a = clerk.assignment;
          const got: StreamState = {
            installed_generation: (a?.generation ?? 0n).toString(),
            installed_incarnation: a?.incarnation ?? "",
            resume_known_generation: resumed.knownGeneration.toString(),
            resume_known_incarnation: resumed.knownIncarnation,
          };
          assert.deepEqual(got, s.then, `after stream ${i}`);
        }
      } finally {
        await clerk.close();
        await server.close();
      }
    });
  }
});
