// Shared by the tests: the repository's paths, a real Connect/gRPC server
// on HTTP/2, a queue to await what a server receives, and a wait helper.

import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import fs from "node:fs";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { ConnectRouter } from "@connectrpc/connect";

/** The repository's root, from dist/test. */
export const repoRoot = new URL("../../../../", import.meta.url);
export const conformanceDir = new URL("api/conformance/", repoRoot);

export function readJSON<T>(url: URL): T {
  return JSON.parse(fs.readFileSync(url, "utf8")) as T;
}

export interface Server {
  addr: string;
  close(): Promise<void>;
}

/** Serves routes with the Connect, gRPC and gRPC-Web protocols over HTTP/2 in cleartext on 127.0.0.1. */
export async function serve(routes: (router: ConnectRouter) => void): Promise<Server> {
  const server = http2.createServer(connectNodeAdapter({ routes }));
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    addr: `127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sessions) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A queue of values, each awaited by one next(). */
export class Queue<T> {
  private items: T[] = [];
  private waiting: ((v: T) => void)[] = [];
  push(v: T): void {
    const w = this.waiting.shift();
    if (w) w(v);
    else this.items.push(v);
  }
  next(timeoutMs: number, what: string): Promise<T> {
    if (this.items.length > 0) return Promise.resolve(this.items.shift()!);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting = this.waiting.filter((w) => w !== got);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const got = (v: T) => {
        clearTimeout(timer);
        resolve(v);
      };
      this.waiting.push(got);
    });
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls cond every 50 ms until it holds; throws after timeoutMs saying what it waited for. */
export async function waitUntil(timeoutMs: number, what: string, cond: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}
