// Subsetting picks the same Distributors as slicerd's Go subset package:
// api/conformance/subset.json holds subset.FrontendIndex and
// subset.Rocksteadier results computed by the Go code.

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { frontendIndex, rocksteadier, subsetOf } from "../src/index.js";
import { conformanceDir, readJSON } from "./helpers.js";

interface SubsetFile {
  frontend_index: { id: string; frontend: string }[];
  rocksteadier: { frontend: string; n: number; k: number; order: number[] }[];
}

const file = readJSON<SubsetFile>(new URL("subset.json", conformanceDir));

interface PreferredFile {
  cases: { frontend: string; k: number; live: string[]; down: string[] | null; preferred: string[] }[];
}

const preferredFile = readJSON<PreferredFile>(new URL("preferred.json", conformanceDir));

describe("subset", () => {
  it("frontendIndex matches Go's subset.FrontendIndex", () => {
    assert.ok(file.frontend_index.length > 0);
    for (const c of file.frontend_index) assert.equal(frontendIndex(c.id).toString(), c.frontend, `id ${JSON.stringify(c.id)}`);
  });

  it("rocksteadier matches Go's subset.Rocksteadier", () => {
    assert.ok(file.rocksteadier.length > 100);
    for (const c of file.rocksteadier) {
      assert.deepEqual(rocksteadier(BigInt(c.frontend), c.n, c.k), c.order, `frontend ${c.frontend}, n ${c.n}, k ${c.k}`);
    }
  });

  it("subsetOf prefers the Distributors the Go Clerk prefers (preferred.json)", () => {
    assert.ok(preferredFile.cases.length > 0);
    for (const c of preferredFile.cases) {
      const { pref } = subsetOf(BigInt(c.frontend), c.k, c.live, c.down ?? []);
      assert.deepEqual(pref, c.preferred, `frontend ${c.frontend}, k ${c.k}, live ${c.live}, down ${c.down}`);
    }
  });

  it("returns nothing for no backends or k 0", () => {
    assert.deepEqual(rocksteadier(1n, 0, 3), []);
    assert.deepEqual(rocksteadier(1n, 5, 0), []);
  });

  it("subsetOf numbers live and down Distributors together and skips the down ones", () => {
    const all = Array.from({ length: 12 }, (_, i) => `10.0.0.${i}:7000`).sort();
    const frontend = 4n;
    const order = rocksteadier(frontend, all.length, all.length).map((i) => all[i]);
    const { pref, rest } = subsetOf(frontend, 3, all);
    assert.deepEqual(pref, order.slice(0, 3));
    assert.deepEqual(rest, all.filter((a) => !pref.includes(a)));
    // The first choice is down: the next in this client's order stands in,
    // and the others keep their places.
    const down = [order[0]];
    const live = all.filter((a) => a !== order[0]);
    const after = subsetOf(frontend, 3, live, down);
    assert.deepEqual(after.pref, order.slice(1, 4));
    assert.ok(!after.rest.includes(order[0]));
  });
});
