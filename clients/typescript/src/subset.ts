// Subsetting: which Distributors a client prefers. A port of slicerd's
// subset.Rocksteadier and subset.FrontendIndex; every client, in any
// language, must draw the same subsets, so this follows the Go code bit for
// bit (64-bit arithmetic as BigInt).

import { xxh64 } from "./hash.js";

/** Backends (and frontends) per lot; part of the contract between clients. */
export const LOT_SIZE = 10;

const lotStartRow = [0, 5, 2, 8, 3, 7, 4, 9, 1, 6];
const MASK64 = (1n << 64n) - 1n;

/** The frontend number of a client that has no task number: XXH64 of id (UTF-8). */
export function frontendIndex(id: string): bigint {
  return xxh64(new TextEncoder().encode(id));
}

function rev32(n: number): number {
  n = ((n >>> 1) & 0x55555555) | ((n & 0x55555555) << 1);
  n = ((n >>> 2) & 0x33333333) | ((n & 0x33333333) << 2);
  n = ((n >>> 4) & 0x0f0f0f0f) | ((n & 0x0f0f0f0f) << 4);
  n = ((n >>> 8) & 0x00ff00ff) | ((n & 0x00ff00ff) << 8);
  return ((n >>> 16) | (n << 16)) >>> 0;
}

function reverse64(x: bigint): bigint {
  const lo = Number(x & 0xffffffffn);
  const hi = Number((x >> 32n) & 0xffffffffn);
  return (BigInt(rev32(lo)) << 32n) | BigInt(rev32(hi));
}

function bitLen(n: number): number {
  return n <= 0 ? 0 : 32 - Math.clz32(n);
}

/** The rank of the first of count evenly spaced ring slots at or clockwise
 * of the van der Corput position of x: ceil(vdc(x)·count) mod count. */
function vdcStart(x: bigint, count: number): number {
  const p = reverse64(x) * BigInt(count);
  let hi = p >> 64n;
  if ((p & MASK64) !== 0n) hi++;
  if (hi === BigInt(count)) return 0;
  return Number(hi);
}

/** Walks 0..count-1 in ring order (by van der Corput position), from a rank. */
class Ring {
  private readonly width: number;
  private readonly mask: bigint;
  private v = 0n;
  constructor(private readonly count: number, startRank: number) {
    this.width = bitLen(count - 1);
    this.mask = (1n << BigInt(this.width)) - 1n;
    for (let i = 0; i < startRank; i++) this.next();
  }
  next(): number {
    for (;;) {
      const item = Number(reverse64(this.v) >> BigInt(64 - this.width));
      this.v = (this.v + 1n) & this.mask;
      if (item < this.count) return item;
    }
  }
}

function mix64(z: bigint): bigint {
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

/** SplitMix64, fixed forever: every client must draw the same shuffles. */
class Rng {
  constructor(private state: bigint) {}
  next(): bigint {
    this.state = (this.state + 0x9e3779b97f4a7c15n) & MASK64;
    return mix64(this.state);
  }
  below(n: number): number {
    return Number((this.next() * BigInt(n)) >> 64n);
  }
}

function shuffleLot(frontLot: bigint, backLot: bigint): number[] {
  const p = Array.from({ length: LOT_SIZE }, (_, i) => i);
  const r = new Rng(mix64(mix64(frontLot) ^ backLot));
  for (let i = LOT_SIZE - 1; i > 0; i--) {
    const j = r.below(i + 1);
    [p[i], p[j]] = [p[j], p[i]];
  }
  return p;
}

/** The indices (0..n-1) of the k backends frontend connects to, in
 * preference order, as slicerd's subset.Rocksteadier returns them. */
export function rocksteadier(frontend: bigint, n: number, k: number): number[] {
  if (n <= 0 || k <= 0) return [];
  k = Math.min(k, n);
  frontend &= MASK64;
  const frontLot = frontend / BigInt(LOT_SIZE);
  let row = lotStartRow[Number(frontend % BigInt(LOT_SIZE))];
  const lots = Math.ceil(n / LOT_SIZE);
  const ring = new Ring(lots, vdcStart(frontLot, lots));
  const order = Array.from({ length: lots }, () => ring.next());
  const perms: number[][] = [];
  const out: number[] = [];
  while (out.length < k) {
    for (let c = 0; c < order.length; c++) {
      if (c === perms.length) perms.push(shuffleLot(frontLot, BigInt(order[c])));
      const b = order[c] * LOT_SIZE + perms[c][row];
      if (b >= n) continue; // padding in the last lot
      out.push(b);
      if (out.length === k) break;
    }
    row = (row + 1) % LOT_SIZE;
  }
  return out;
}

/** This client's preferred Distributors and the others. The Distributors
 * are numbered over live and down together, sorted, so every client
 * numbers them alike; pref is the first k live ones of rocksteadier's
 * order for frontend, rest the other live ones, sorted. */
export function subsetOf(frontend: bigint, k: number, live: readonly string[], down: readonly string[] = []): { pref: string[]; rest: string[] } {
  const all = [...new Set([...live, ...down])].sort();
  const isLive = new Set(live);
  const pref: string[] = [];
  for (const i of rocksteadier(frontend, all.length, all.length)) {
    if (pref.length === k) break;
    if (isLive.has(all[i])) pref.push(all[i]);
  }
  const inPref = new Set(pref);
  return { pref, rest: all.filter((a) => isLive.has(a) && !inPref.has(a)) };
}
