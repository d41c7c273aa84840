"""Rocksteadier subsetting, ported from the Go package subset: which
Distributors a client prefers. Every client of a fleet must compute the
same subsets, whatever its language, so this is the Go algorithm step for
step (lots of 10, SplitMix64 shuffles, van der Corput ring order), checked
against values the Go code computes (testdata/go_values.json)."""

import xxhash

__all__ = ["LOT_SIZE", "rocksteadier", "frontend_index", "preferred"]

LOT_SIZE = 10
_M64 = (1 << 64) - 1
# Where the frontend at each position of its lot starts reading (the
# inverse of the Go lotRowFrontend permutation).
_LOT_START_ROW = (0, 5, 2, 8, 3, 7, 4, 9, 1, 6)


def _reverse64(x):
    return int(f"{x:064b}"[::-1], 2)


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & _M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & _M64
    return z ^ (z >> 31)


def _vdc_start(x, count):
    # ceil(vdc(x) * count) mod count, in 128-bit arithmetic as Go's
    # bits.Mul64.
    prod = _reverse64(x) * count
    hi, lo = prod >> 64, prod & _M64
    if lo:
        hi += 1
    return 0 if hi == count else hi


def _ring(count, start_rank):
    """Yields 0..count-1 in ring order, starting at rank start_rank,
    forever."""
    width = (count - 1).bit_length()
    mask = (1 << width) - 1
    v = 0

    def nxt():
        nonlocal v
        while True:
            item = (_reverse64(v) >> (64 - width)) if width else 0
            v = (v + 1) & mask
            if item < count:
                return item

    for _ in range(start_rank):
        nxt()
    while True:
        yield nxt()


def _shuffle_lot(front_lot, back_lot):
    p = list(range(LOT_SIZE))
    state = _mix64(_mix64(front_lot) ^ back_lot)
    for i in range(LOT_SIZE - 1, 0, -1):
        state = (state + 0x9e3779b97f4a7c15) & _M64
        j = (_mix64(state) * (i + 1)) >> 64
        p[i], p[j] = p[j], p[i]
    return p


def rocksteadier(frontend, n, k):
    """The indices (0..n-1) of the k backends frontend number ``frontend``
    connects to, in preference order; all n when k >= n, [] when n or k is
    not positive. The same as Go's subset.Rocksteadier."""
    if n <= 0 or k <= 0:
        return []
    if not 0 <= frontend <= _M64:
        raise ValueError(f"slicerd_clerk: frontend number {frontend} is not a 64-bit unsigned integer")
    k = min(k, n)
    front_lot = frontend // LOT_SIZE
    row = _LOT_START_ROW[frontend % LOT_SIZE]
    lots = (n + LOT_SIZE - 1) // LOT_SIZE
    ring = _ring(lots, _vdc_start(front_lot, lots))
    order = [next(ring) for _ in range(lots)]
    perms = {}
    out = []
    while len(out) < k:
        for c, lot in enumerate(order):
            perm = perms.get(c)
            if perm is None:
                perm = perms[c] = _shuffle_lot(front_lot, lot)
            b = lot * LOT_SIZE + perm[row]
            if b >= n:
                continue  # padding in the last lot
            out.append(b)
            if len(out) == k:
                break
        row = (row + 1) % LOT_SIZE
    return out


def frontend_index(client_id):
    """A client's frontend number from its ID (str or bytes): XXH64, as
    Go's subset.FrontendIndex, so a client restarted with the same ID
    prefers the same Distributors."""
    if isinstance(client_id, str):
        client_id = client_id.encode("utf-8")
    return xxhash.xxh64_intdigest(client_id)


def preferred(frontend, k, live, down=()):
    """This client's k preferred Distributors among ``live`` in preference
    order, and the other live ones sorted, as the Go Clerk picks them: the
    addresses of live and down together are sorted and numbered, so a
    Distributor known to be down keeps its number and only the clients
    that preferred it move (each to the next in its own order)."""
    if k <= 0 or not live:
        return [], list(live)
    everyone = sorted(set(live) | set(down), key=lambda a: a.encode())
    alive = set(live)
    pref = []
    for i in rocksteadier(frontend, len(everyone), len(everyone)):
        if len(pref) == k:
            break
        if everyone[i] in alive:
            pref.append(everyone[i])
    chosen = set(pref)
    return pref, [a for a in everyone if a in alive and a not in chosen]
