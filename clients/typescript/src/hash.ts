// Slice keys: XXH64(key, seed 0) >> 1, computed exactly as a BigInt
// (docs/client-contract.md, section 1).

import xxhash from "xxhash-wasm";

const xxh = await xxhash();
const utf8 = new TextEncoder();

/** The end of the slice-key space, 2^63: slice keys are in [0, KEY_SPACE_END). */
export const KEY_SPACE_END = 1n << 63n;

/** A key's bytes: a string is encoded as UTF-8. */
export function keyBytes(key: Uint8Array | string): Uint8Array {
  if (typeof key === "string") return utf8.encode(key);
  if (key instanceof Uint8Array) return key;
  throw new TypeError(`slicerd: a key must be a string or a Uint8Array, not ${describe(key)}`);
}

/** The slice key of key: XXH64 of its bytes (a string as UTF-8) with seed 0, shifted right by one bit. */
export function sliceKey(key: Uint8Array | string): bigint {
  return xxh.h64Raw(keyBytes(key), 0n) >> 1n;
}

/** XXH64 (seed 0) of bytes, as an unsigned 64-bit BigInt. */
export function xxh64(bytes: Uint8Array): bigint {
  return xxh.h64Raw(bytes, 0n);
}

/** A streaming XXH64 (seed 0). */
export function xxh64Stream(): { update(input: Uint8Array): unknown; digest(): bigint } {
  return xxh.create64(0n);
}

export function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? `a ${(v as object).constructor?.name ?? "object"}` : `${typeof v} ${String(v)}`;
}
