// The assignment cache file (docs/client-contract.md, section 5): the
// newest installed assignment, with its incarnation, written atomically (a
// new file renamed over the old); a damaged or truncated file, or one of
// another job, reads as absent.

import fs from "node:fs";
import path from "node:path";
import { checksum, validateAssignment, type Assignment } from "./assignment.js";

const FORMAT = "slicerd-clerk-cache/1";

interface CacheDoc {
  format: string;
  job: string;
  incarnation: string;
  generation: string;
  tasks: { name: string; address: string }[];
  slices: { start: string; end: string; tasks: string[] }[];
  checksum: string;
}

export function encodeCache(a: Assignment): string {
  const doc: CacheDoc = {
    format: FORMAT,
    job: a.job,
    incarnation: a.incarnation,
    generation: a.generation.toString(),
    tasks: a.tasks.map((t) => ({ name: t.name, address: t.address })),
    slices: a.slices.map((s) => ({ start: s.start.toString(), end: s.end.toString(), tasks: [...s.tasks] })),
    checksum: checksum(a).toString(),
  };
  return JSON.stringify(doc) + "\n";
}

/** The assignment in the file's text, for job; throws saying why when the
 * text is not a whole, valid cache of the job. */
export function decodeCache(text: string, job: string): Assignment {
  const doc = JSON.parse(text) as CacheDoc;
  if (!doc || doc.format !== FORMAT) throw new Error(`not a ${FORMAT} file`);
  if (doc.job !== job) throw new Error(`it holds job ${JSON.stringify(doc.job)}, not ${JSON.stringify(job)}`);
  const a: Assignment = {
    job: doc.job,
    incarnation: String(doc.incarnation ?? ""),
    generation: BigInt(doc.generation),
    tasks: doc.tasks.map((t) => ({ name: String(t.name), address: String(t.address) })),
    slices: doc.slices.map((s) => ({ start: BigInt(s.start), end: BigInt(s.end), tasks: s.tasks.map(String) })),
  };
  validateAssignment(a);
  if (checksum(a).toString() !== doc.checksum) throw new Error("its checksum does not match its content");
  return a;
}

/** Writes the newest assignment it is given, one write at a time; an
 * assignment stored while a write runs replaces any still waiting. */
export class CacheWriter {
  private pending: Assignment | undefined;
  private running: Promise<void> | undefined;
  private seq = 0;

  constructor(
    readonly file: string,
    private readonly onError: (err: unknown) => void,
  ) {}

  store(a: Assignment): void {
    this.pending = a;
    if (!this.running) this.running = this.drain().finally(() => (this.running = undefined));
  }

  /** Resolves once every stored assignment has been written (or failed). */
  async flush(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    while (this.pending) {
      const a = this.pending;
      this.pending = undefined;
      const tmp = path.join(path.dirname(this.file), `.${path.basename(this.file)}.${process.pid}.${this.seq++}.tmp`);
      try {
        // Readable by the Clerk's user only, as the Go Clerk's cache file
        // is; the directory is synced after the rename, so that the new
        // file, not only its bytes, survives a crash.
        const fh = await fs.promises.open(tmp, "w", 0o600);
        try {
          await fh.writeFile(encodeCache(a));
          await fh.sync();
        } finally {
          await fh.close();
        }
        await fs.promises.rename(tmp, this.file);
        const dh = await fs.promises.open(path.dirname(this.file), "r");
        try {
          await dh.sync();
        } finally {
          await dh.close();
        }
      } catch (err) {
        await fs.promises.rm(tmp, { force: true }).catch(() => {});
        this.onError(err);
      }
    }
  }
}
