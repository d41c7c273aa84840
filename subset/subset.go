package subset

import "math/bits"

// LotSize is the number of backends (and of frontends) in a lot. It is a
// constant on purpose: deriving it from the number of frontends, the number
// of backends or the subset size would make every change of those numbers
// reshuffle the lots and move connections. Changing it changes every
// subset, so it is part of the wire contract between clients.
const LotSize = 10

// lotRowFrontend is the article's fixed in-lot permutation for LotSize 10:
// row r of a frontend lot's table is where the frontend at position
// lotRowFrontend[r] of the lot starts reading. It spreads consecutive
// frontends over the rows (positions 0, 1, 2 start on rows 0, 5, 2), so an
// incomplete last frontend lot still starts on rows far apart instead of
// overlapping on neighbouring ones.
var lotRowFrontend = [LotSize]uint8{0, 8, 2, 4, 6, 1, 9, 5, 3, 7}

// lotStartRow is the inverse of lotRowFrontend: the row where the frontend
// at each position of its lot starts.
var lotStartRow = [LotSize]uint8{0, 5, 2, 8, 3, 7, 4, 9, 1, 6}

// maxStackLots is how many backend lots Rocksteadier handles without
// allocating scratch space (n ≤ 160 backends); beyond that it allocates.
const maxStackLots = 16

// Rocksteadier returns the indices (0..n-1) of the k backends that frontend
// number frontend connects to, in preference order: the first index is the
// one to try first. If k >= n it returns all n backends in that frontend's
// order; if n <= 0 or k <= 0 it returns nil.
//
// Backends are grouped into lots of LotSize consecutive indices (the last
// lot padded with indices >= n that are skipped), frontends likewise by
// frontend/LotSize. Every frontend lot shuffles every backend lot with a
// generator seeded by the frontend lot and the backend lot, orders the
// backend lots by Ringsteady (the frontend lot's van der Corput position on
// a ring of evenly spaced backend lots), and lays them out as a table: one
// column per backend lot in that order, one row per position in the
// shuffled lots. A frontend starts at the row its position in its lot maps
// to and reads row by row, wrapping to the first row after the last, so the
// LotSize frontends of a lot cover the table evenly.
//
// The result depends only on (frontend, n, k) and is a prefix of the
// result for any larger k, so growing the subset only adds connections.
// Adding backend n (appending, not inserting) changes at most one entry of
// any frontend's subset while the number of lots stays the same.
func Rocksteadier(frontend uint64, n, k int) []int {
	if n <= 0 || k <= 0 {
		return nil
	}
	k = min(k, n)
	frontLot := frontend / LotSize
	row := int(lotStartRow[frontend%LotSize])
	lots := (n + LotSize - 1) / LotSize

	var orderBuf [maxStackLots]int32
	var permBuf [maxStackLots][LotSize]uint8
	var order []int32
	var perms [][LotSize]uint8
	if lots <= maxStackLots {
		order, perms = orderBuf[:lots], permBuf[:lots]
	} else {
		order, perms = make([]int32, lots), make([][LotSize]uint8, lots)
	}
	ringOrder(order, vdcStart(frontLot, lots))

	out := make([]int, 0, k)
	shuffled := 0 // columns whose lot is shuffled in perms
	for len(out) < k {
		for c, lot := range order {
			if c == shuffled {
				shuffleLot(&perms[c], frontLot, uint64(lot))
				shuffled++
			}
			b := int(lot)*LotSize + int(perms[c][row])
			if b >= n {
				continue // padding in the last lot
			}
			out = append(out, b)
			if len(out) == k {
				break
			}
		}
		row = (row + 1) % LotSize
	}
	return out
}

// Ringsteady returns frontend's k backends by Ringsteady subsetting with
// backend scaling: backends sit evenly spaced on a ring in the order of the
// binary van der Corput sequence of their indices, the frontend sits at the
// van der Corput position of its number, and it takes the first k backends
// clockwise. Same conventions as Rocksteadier. At most n distinct subsets
// exist, which is why Rocksteadier adds lots.
func Ringsteady(frontend uint64, n, k int) []int {
	if n <= 0 || k <= 0 {
		return nil
	}
	k = min(k, n)
	out := make([]int, 0, k)
	r := newRing(n, vdcStart(frontend, n))
	for len(out) < k {
		out = append(out, r.next())
	}
	return out
}

// vdcStart is the rank of the first of count evenly spaced ring slots at or
// clockwise of the van der Corput position of x: ceil(vdc(x)·count) mod count.
func vdcStart(x uint64, count int) int {
	hi, lo := bits.Mul64(bits.Reverse64(x), uint64(count))
	if lo != 0 {
		hi++
	}
	if hi == uint64(count) {
		return 0
	}
	return int(hi)
}

// ring walks 0..count-1 in ring order: sorted by van der Corput position
// (the index bit-reversed), which backend scaling then spaces evenly, the
// r-th item at r/count. The walk starts at a given rank and wraps around.
type ring struct {
	count, width int    // 2^width >= count
	v            uint64 // next bit-reversed position to try
}

func newRing(count, startRank int) ring {
	r := ring{count: count, width: bits.Len(uint(count - 1))}
	for range startRank {
		r.next()
	}
	return r
}

// next returns the next item clockwise. Positions whose item is >= count
// are empty (fewer than half are), so a call costs two steps at most on
// average.
func (r *ring) next() int {
	mask := uint64(1)<<r.width - 1
	for {
		item := int(bits.Reverse64(r.v) >> (64 - r.width))
		r.v = (r.v + 1) & mask
		if item < r.count {
			return item
		}
	}
}

// ringOrder fills order (one entry per item) with the items in ring order
// starting at rank start.
func ringOrder(order []int32, start int) {
	r := newRing(len(order), start)
	for i := range order {
		order[i] = int32(r.next())
	}
}

// shuffleLot writes a permutation of 0..LotSize-1 into p, drawn from a
// generator seeded by the frontend lot and the backend lot. Seeding by both
// makes every lot's shuffle independent of how many lots exist, so adding
// backends never reshuffles an existing lot, and lets a frontend shuffle
// only the lots it reads.
func shuffleLot(p *[LotSize]uint8, frontLot, backLot uint64) {
	for i := range p {
		p[i] = uint8(i)
	}
	r := rng{state: mix64(mix64(frontLot) ^ backLot)}
	for i := LotSize - 1; i > 0; i-- {
		j := r.below(i + 1)
		p[i], p[j] = p[j], p[i]
	}
}

// rng is SplitMix64: small, fast, and fixed forever, since every client
// must draw the same shuffles to agree on subsets.
type rng struct{ state uint64 }

func (r *rng) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	return mix64(r.state)
}

// below returns a number in [0, n) by multiply-shift; the bias is below
// n/2^64, far under anything measurable here.
func (r *rng) below(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
