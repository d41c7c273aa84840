// Assignments, their validation and deltas with their checksum, as
// slicerd's assign and api packages define them.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { AssignmentDeltaSchema, WatchAssignmentResponseSchema } from "../src/gen/slicer/v1/slicer_pb.js";
import {
  applyDelta,
  checksum,
  DeltaError,
  InvalidAssignmentError,
  KEY_SPACE_END,
  receive,
  supersedes,
  validateAssignment,
  type Assignment,
} from "../src/index.js";

const half = KEY_SPACE_END / 2n;
const base: Assignment = {
  job: "kv",
  generation: 4n,
  incarnation: "inc-a",
  tasks: [
    { name: "kv-0", address: "10.0.0.1:80" },
    { name: "kv-1", address: "10.0.0.2:80" },
  ],
  slices: [
    { start: 0n, end: half, tasks: ["kv-0"] },
    { start: half, end: KEY_SPACE_END, tasks: ["kv-0", "kv-1"] },
  ],
};

describe("assignments", () => {
  it("accepts a valid assignment", () => validateAssignment(base));

  const broken: [string, Partial<Assignment>][] = [
    ["a gap", { slices: [{ start: 0n, end: 5n, tasks: ["kv-0"] }, { start: 6n, end: KEY_SPACE_END, tasks: ["kv-0"] }] }],
    ["an overlap", { slices: [{ start: 0n, end: 5n, tasks: ["kv-0"] }, { start: 4n, end: KEY_SPACE_END, tasks: ["kv-0"] }] }],
    ["a short end", { slices: [{ start: 0n, end: half, tasks: ["kv-0"] }] }],
    ["an end past 2^63", { slices: [{ start: 0n, end: KEY_SPACE_END + 1n, tasks: ["kv-0"] }] }],
    ["an unknown task", { slices: [{ start: 0n, end: KEY_SPACE_END, tasks: ["kv-9"] }] }],
    ["a slice without tasks", { slices: [{ start: 0n, end: KEY_SPACE_END, tasks: [] }] }],
    ["unsorted slice tasks", { slices: [{ start: 0n, end: KEY_SPACE_END, tasks: ["kv-1", "kv-0"] }] }],
    ["unsorted tasks", { tasks: [base.tasks[1], base.tasks[0]] }],
    ["generation 0", { generation: 0n }],
    ["a bad incarnation", { incarnation: "a b" }],
    ["a bad job name", { job: "KV" }],
    ["no slices", { slices: [] }],
  ];
  for (const [what, change] of broken) {
    it(`refuses ${what}`, () => assert.throws(() => validateAssignment({ ...base, ...change }), InvalidAssignmentError));
  }

  it("compares versions by incarnation, then generation", () => {
    assert.ok(supersedes({ incarnation: "b", generation: 1n }, { incarnation: "a", generation: 9n }));
    assert.ok(!supersedes({ incarnation: "a", generation: 9n }, { incarnation: "a", generation: 9n }));
    assert.ok(!supersedes({ incarnation: "a", generation: 8n }, { incarnation: "a", generation: 9n }));
    assert.ok(supersedes({ incarnation: "", generation: 10n }, { incarnation: "a", generation: 9n }));
    assert.ok(!supersedes({ incarnation: "", generation: 9n }, { incarnation: "a", generation: 9n }));
  });
});

describe("deltas", () => {
  const next: Assignment = {
    ...base,
    generation: 5n,
    tasks: [
      { name: "kv-0", address: "10.0.0.1:80" },
      { name: "kv-2", address: "10.0.0.3:80" },
    ],
    slices: [
      { start: 0n, end: 10n, tasks: ["kv-0"] },
      { start: 10n, end: KEY_SPACE_END, tasks: ["kv-2"] },
    ],
  };
  const delta = (change: Record<string, unknown> = {}) =>
    create(AssignmentDeltaSchema, {
      job: "kv",
      incarnation: "inc-a",
      baseGeneration: 4n,
      generation: 5n,
      slices: [{ start: 10n, end: KEY_SPACE_END, tasks: ["kv-2"] }],
      tasks: [{ name: "kv-2", address: "10.0.0.3:80" }],
      removedTasks: ["kv-1"],
      checksum: checksum(next),
      ...change,
    });

  it("paints slices over the base, cutting the ones it overlaps, and checks the checksum", () => {
    assert.deepEqual(applyDelta(base, delta()), next);
  });

  it("never modifies the base", () => {
    const before = structuredClone(base);
    applyDelta(base, delta());
    assert.deepEqual(base, before);
  });

  const bad: [string, Record<string, unknown>][] = [
    ["a wrong checksum", { checksum: checksum(next) ^ 1n }],
    ["another base generation", { baseGeneration: 3n }],
    ["another incarnation", { incarnation: "inc-b" }],
    ["another job", { job: "other" }],
    ["a generation not after its base", { generation: 4n }],
    ["an unknown removed task", { removedTasks: ["kv-1", "kv-9"] }],
    ["a task listed twice", { tasks: [{ name: "kv-2", address: "a:1" }, { name: "kv-2", address: "a:1" }] }],
    ["overlapping painted slices", { slices: [{ start: 10n, end: 20n, tasks: ["kv-2"] }, { start: 15n, end: KEY_SPACE_END, tasks: ["kv-2"] }] }],
    ["a result naming a removed task", { slices: [], tasks: [], removedTasks: ["kv-1"] }],
  ];
  for (const [what, change] of bad) {
    it(`refuses ${what}`, () => assert.throws(() => applyDelta(base, delta(change)), DeltaError));
  }

  it("refuses a delta with nothing held", () => assert.throws(() => applyDelta(undefined, delta()), DeltaError));

  it("refuses a message with both an assignment and a delta, or neither", () => {
    const both = create(WatchAssignmentResponseSchema, { delta: delta(), assignment: { job: "kv" } });
    assert.throws(() => receive(base, both), InvalidAssignmentError);
    assert.throws(() => receive(base, create(WatchAssignmentResponseSchema, {})), InvalidAssignmentError);
  });
});
