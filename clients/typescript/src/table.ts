// The lookup table over one assignment: a binary search over slice ends.

import type { Assignment, Task } from "./assignment.js";
import { KEY_SPACE_END } from "./hash.js";

/** An immutable lookup structure over one valid assignment. */
export class Table {
  readonly assignment: Assignment;
  private readonly ends: bigint[];
  private readonly tasks: Task[][];

  constructor(a: Assignment) {
    this.assignment = a;
    const byName = new Map(a.tasks.map((t) => [t.name, t.address]));
    this.ends = a.slices.map((s) => s.end);
    this.tasks = a.slices.map((s) => s.tasks.map((name) => ({ name, address: byName.get(name) ?? "" })));
  }

  /** The index of the slice that contains slice key h, which must be in [0, 2^63). */
  find(h: bigint): number {
    if (typeof h !== "bigint" || h < 0n || h >= KEY_SPACE_END) {
      throw new RangeError(`slicerd: a slice key must be a BigInt in [0, 2^63), not ${String(h)}`);
    }
    const ends = this.ends;
    let lo = 0;
    let hi = ends.length;
    while (lo < hi) {
      const m = (lo + hi) >>> 1;
      if (ends[m] <= h) lo = m + 1;
      else hi = m;
    }
    return lo;
  }

  /** The tasks of slice i with their addresses, in the assignment's order. Read-only. */
  slice(i: number): readonly Task[] {
    return this.tasks[i];
  }
}
