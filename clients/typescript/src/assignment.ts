// Assignments as the Clerk holds them, their validation, and deltas with
// their checksum, exactly as slicerd's api/delta.go and assign.Validate
// define them (docs/api.md, "Deltas").

import type {
  Assignment as AssignmentMessage,
  AssignmentDelta,
  WatchAssignmentResponse,
} from "./gen/slicer/v1/slicer_pb.js";
import { DeltaError, InvalidAssignmentError, InvalidNameError } from "./errors.js";
import { KEY_SPACE_END, xxh64 } from "./hash.js";

/** A task of an assignment: its name and the address clients reach it at. */
export interface Task {
  readonly name: string;
  readonly address: string;
}

/** The half-open range [start, end) of slice keys and the names of the tasks serving it, sorted. */
export interface Slice {
  readonly start: bigint;
  readonly end: bigint;
  readonly tasks: readonly string[];
}

/** One job's assignment: every slice key in [0, 2^63) mapped to tasks. Read-only. */
export interface Assignment {
  readonly job: string;
  readonly generation: bigint;
  /** The assignment store's incarnation; empty from a slicerd that predates them. */
  readonly incarnation: string;
  /** Sorted by name. */
  readonly tasks: readonly Task[];
  /** Sorted by start, contiguous, covering [0, 2^63). */
  readonly slices: readonly Slice[];
}

/** The version of an assignment: what a watch sends as known_incarnation and known_generation. */
export interface Version {
  readonly incarnation: string;
  readonly generation: bigint;
}

export const NO_VERSION: Version = { incarnation: "", generation: 0n };

export const MAX_JOB_NAME_LEN = 63;
export const MAX_TASK_NAME_LEN = 128;
export const MAX_INCARNATION_LEN = 64;
const MAX_UINT64 = (1n << 64n) - 1n;

/** Whether an assignment at v replaces the held one at held: any
 * generation of another, non-empty incarnation (a reset), or a higher
 * generation (an empty incarnation compares by generation only). */
export function supersedes(v: Version, held: Version): boolean {
  if (v.incarnation !== "" && v.incarnation !== held.incarnation) return true;
  return v.generation > held.generation;
}

/** Whether v and held are of two different known incarnations: a reset, not a step. */
export function isReset(v: Version, held: Version): boolean {
  return v.incarnation !== "" && held.incarnation !== "" && v.incarnation !== held.incarnation;
}

export function versionOf(a: Assignment | undefined): Version {
  return a ? { incarnation: a.incarnation, generation: a.generation } : NO_VERSION;
}

const byteLength = (s: string) => Buffer.byteLength(s, "utf8");

function validateName(kind: string, name: string, max: number, upperAndColon: boolean): void {
  if (typeof name !== "string") throw new InvalidNameError(`${kind} name must be a string`);
  if (name === "") throw new InvalidNameError(`${kind} name is empty`);
  if (byteLength(name) > max) {
    throw new InvalidNameError(`${kind} name ${JSON.stringify(name.slice(0, 20))}… is ${byteLength(name)} bytes long; the limit is ${max}`);
  }
  for (let i = 0; i < name.length; i++) {
    const c = name[i];
    const ok =
      (c >= "a" && c <= "z") || (c >= "0" && c <= "9") ||
      (i > 0 && (c === "-" || c === "_" || c === ".")) ||
      (upperAndColon && ((c >= "A" && c <= "Z") || (i > 0 && c === ":")));
    if (!ok) {
      const allowed = upperAndColon ? "letters, digits, '-', '_', '.' and ':'" : "lower-case letters, digits, '-', '_' and '.'";
      throw new InvalidNameError(`${kind} name ${JSON.stringify(name)} has ${JSON.stringify(c)} at character ${i}; use ${allowed}, starting with a letter or digit`);
    }
  }
}

/** Accepts 1–63 lower-case letters, digits, '-', '_' and '.', starting with a letter or digit. */
export function validateJobName(name: string): void {
  validateName("job", name, MAX_JOB_NAME_LEN, false);
}

/** Accepts 1–128 letters, digits, '-', '_', '.' and ':', starting with a letter or digit. */
export function validateTaskName(name: string): void {
  validateName("task", name, MAX_TASK_NAME_LEN, true);
}

/** Accepts 1–64 letters, digits, '-' and '_'. */
export function validateIncarnation(id: string): void {
  if (id === "") throw new InvalidNameError("incarnation is empty");
  if (byteLength(id) > MAX_INCARNATION_LEN) {
    throw new InvalidNameError(`incarnation ${JSON.stringify(id.slice(0, 20))}… is ${byteLength(id)} bytes long; the limit is ${MAX_INCARNATION_LEN}`);
  }
  if (!/^[A-Za-z0-9_-]+$/.test(id)) {
    throw new InvalidNameError(`incarnation ${JSON.stringify(id)} has a character other than letters, digits, '-' and '_'`);
  }
}

const hex = (k: bigint) => "0x" + k.toString(16);

/** Throws an InvalidAssignmentError saying what is wrong with a, if anything. */
export function validateAssignment(a: Assignment): void {
  const bad = (msg: string) => new InvalidAssignmentError(`invalid assignment: ${msg}`);
  const wrap = (prefix: string, f: () => void) => {
    try {
      f();
    } catch (e) {
      throw bad(`${prefix}${(e as Error).message}`);
    }
  };
  wrap("", () => validateJobName(a.job));
  const job = `job ${JSON.stringify(a.job)}`;
  if (typeof a.generation !== "bigint" || a.generation < 0n || a.generation > MAX_UINT64) throw bad(`${job}: generation is not a 64-bit unsigned integer`);
  if (a.generation === 0n) throw bad(`${job}: generation 0 is reserved for "no assignment"`);
  if (a.incarnation !== "") wrap(`${job}: `, () => validateIncarnation(a.incarnation));
  const known = new Set<string>();
  a.tasks.forEach((t, i) => {
    wrap(`${job}: task ${i}: `, () => validateTaskName(t.name));
    if (i > 0 && a.tasks[i - 1].name >= t.name) throw bad(`${job}: tasks not sorted or duplicated at ${JSON.stringify(t.name)}`);
    if (typeof t.address !== "string") throw bad(`${job}: task ${JSON.stringify(t.name)} has no address string`);
    known.add(t.name);
  });
  if (a.slices.length === 0) throw bad(`${job}: no slices`);
  let next = 0n;
  a.slices.forEach((s, i) => {
    if (s.start > next) throw bad(`${job}: gap [${hex(next)}, ${hex(s.start)}) before slice ${i}`);
    if (s.start < next) throw bad(`${job}: slice ${i} starts at ${hex(s.start)}, overlapping the previous slice that ends at ${hex(next)}`);
    if (s.end <= s.start) throw bad(`${job}: slice ${i} is empty or inverted [${hex(s.start)}, ${hex(s.end)})`);
    if (s.end > KEY_SPACE_END) throw bad(`${job}: slice ${i} ends at ${hex(s.end)}, past the key space end ${hex(KEY_SPACE_END)}`);
    if (s.tasks.length === 0) throw bad(`${job}: slice ${i} [${hex(s.start)}, ${hex(s.end)}) has no task`);
    s.tasks.forEach((name, j) => {
      if (j > 0 && s.tasks[j - 1] >= name) throw bad(`${job}: slice ${i}: tasks not sorted or duplicated at ${JSON.stringify(name)}`);
      if (!known.has(name)) throw bad(`${job}: slice ${i} names unknown task ${JSON.stringify(name)}`);
    });
    next = s.end;
  });
  if (next !== KEY_SPACE_END) throw bad(`${job}: gap [${hex(next)}, ${hex(KEY_SPACE_END)}) at the end of the key space`);
}

/** The assignment a message carries, validated; throws InvalidAssignmentError. */
export function fromProto(p: AssignmentMessage | undefined): Assignment {
  if (!p) throw new InvalidAssignmentError("invalid assignment: message has no assignment");
  const a: Assignment = {
    job: p.job,
    generation: p.generation,
    incarnation: p.incarnation,
    tasks: p.tasks.map((t) => ({ name: t.name, address: t.address })),
    slices: p.slices.map((s) => ({ start: s.start, end: s.end, tasks: [...s.tasks] })),
  };
  validateAssignment(a);
  return a;
}

/** A growable byte buffer for the checksum's canonical form. */
class Bytes {
  buf = new Uint8Array(1024);
  view = new DataView(this.buf.buffer);
  len = 0;
  private room(n: number) {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const b = new Uint8Array(size);
    b.set(this.buf.subarray(0, this.len));
    this.buf = b;
    this.view = new DataView(b.buffer);
  }
  str(s: string) {
    const max = s.length * 3 + 1;
    this.room(max);
    this.len += utf8.encodeInto(s, this.buf.subarray(this.len)).written;
    this.buf[this.len++] = 0;
  }
  u64(v: bigint) {
    this.room(8);
    this.view.setBigUint64(this.len, v, false);
    this.len += 8;
  }
  byte(b: number) {
    this.room(1);
    this.buf[this.len++] = b;
  }
}
const utf8 = new TextEncoder();

/** XXH64 (seed 0) of a's canonical form, as AssignmentDelta.checksum defines it. */
export function checksum(a: Assignment): bigint {
  const b = new Bytes();
  b.str(a.job);
  b.str(a.incarnation);
  b.u64(a.generation);
  for (const t of a.tasks) {
    b.str(t.name);
    b.str(t.address);
  }
  for (const s of a.slices) {
    b.u64(s.start);
    b.u64(s.end);
    for (const t of s.tasks) b.str(t);
    b.byte(0xff);
  }
  return xxh64(b.buf.subarray(0, b.len));
}

const hex16 = (v: bigint) => v.toString(16).padStart(16, "0");

/** The assignment d turns base into, validated and checked against d's
 * checksum; base is not modified. Throws DeltaError when the delta is for
 * another job, incarnation or base generation, is malformed, or its result
 * is not the assignment the server meant. */
export function applyDelta(base: Assignment | undefined, d: AssignmentDelta | undefined): Assignment {
  const fail = (msg: string) => new DeltaError(`assignment delta does not apply: ${msg}`);
  if (!d) throw fail("message has no delta");
  if (!base) throw fail("no assignment is held to apply it to");
  if (d.job !== base.job) throw fail(`it is of job ${JSON.stringify(d.job)}, the held assignment of job ${JSON.stringify(base.job)}`);
  if (d.incarnation !== base.incarnation || d.baseGeneration !== base.generation) {
    throw fail(`it applies to generation ${d.baseGeneration} of incarnation ${JSON.stringify(d.incarnation)}, the held assignment is generation ${base.generation} of ${JSON.stringify(base.incarnation)}`);
  }
  if (d.generation <= base.generation) throw fail(`it leads to generation ${d.generation}, not later than its base ${base.generation}`);

  const paint = d.slices;
  let prevEnd = 0n;
  paint.forEach((p, i) => {
    if (p.start >= p.end || p.end > KEY_SPACE_END || (i > 0 && p.start < prevEnd)) {
      throw fail(`slice ${i} [${hex(p.start)}, ${hex(p.end)}) is empty, beyond the key space, or not after the one before`);
    }
    prevEnd = p.end;
  });

  const out: Slice[] = [];
  const held = base.slices;
  let i = 0;
  // keep copies the held slices' parts within [from, to).
  const keep = (from: bigint, to: bigint) => {
    while (i < held.length && held[i].end <= from) i++;
    for (let k = i; k < held.length && held[k].start < to; k++) {
      const h = held[k];
      out.push({ start: h.start > from ? h.start : from, end: h.end < to ? h.end : to, tasks: h.tasks });
    }
  };
  let pos = 0n;
  for (const p of paint) {
    if (p.start > pos) keep(pos, p.start);
    out.push({ start: p.start, end: p.end, tasks: [...p.tasks] });
    pos = p.end;
  }
  if (pos < KEY_SPACE_END) keep(pos, KEY_SPACE_END);

  const baseNames = new Set(base.tasks.map((t) => t.name));
  for (const name of d.removedTasks) {
    if (!baseNames.has(name)) throw fail(`it removes task ${JSON.stringify(name)}, which the held assignment does not list`);
  }
  const removed = new Set(d.removedTasks);
  const upserted = new Set<string>();
  const tasks: Task[] = [];
  for (const t of d.tasks) {
    if (upserted.has(t.name)) throw fail(`task ${JSON.stringify(t.name)} is listed twice`);
    upserted.add(t.name);
    tasks.push({ name: t.name, address: t.address });
  }
  for (const t of base.tasks) {
    if (!removed.has(t.name) && !upserted.has(t.name)) tasks.push(t);
  }
  tasks.sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0));

  const a: Assignment = { job: base.job, generation: d.generation, incarnation: base.incarnation, tasks, slices: out };
  try {
    validateAssignment(a);
  } catch (e) {
    throw fail(`the result is not a valid assignment: ${(e as Error).message}`);
  }
  const sum = checksum(a);
  if (sum !== d.checksum) throw fail(`the result's checksum is ${hex16(sum)}, the delta says ${hex16(d.checksum)}`);
  return a;
}

/** The assignment a WatchAssignment message carries: its full assignment
 * (validated), or its delta applied to held. A message with both or
 * neither throws InvalidAssignmentError; a delta that does not apply
 * throws DeltaError. */
export function receive(held: Assignment | undefined, m: WatchAssignmentResponse): Assignment {
  if (m.assignment && m.delta) throw new InvalidAssignmentError("invalid assignment: message has both an assignment and a delta");
  if (m.delta) return applyDelta(held, m.delta);
  return fromProto(m.assignment);
}
