// Package subset chooses which k of N backends a frontend connects to:
// in slicerd, which k of the N Distributors a Clerk or a Slicelet streams
// assignments from.
//
// Rocksteadier is the algorithm to use (Ward, Wankadia and Guliani,
// "Reinventing Backend Subsetting at Google", CACM 2023). It balances
// connections across backends when frontends are numbered 0..M-1, gives
// many distinct subsets, never moves a connection when frontends come or
// go, moves about the new backend's fair share when one is appended, only
// adds connections when k grows, and spreads each subset over the index
// range. Random, Deterministic and Ringsteady are the article's earlier
// algorithms, kept as baselines; Measure and the helpers next to it compute
// the article's properties, and cmd/subsetting prints the comparison in
// docs/subsetting.md.
//
// Backends are indices into a list of backend names that every frontend
// sorts the same way; appending a name that sorts last is the cheap
// change, while inserting or removing a name in the middle renumbers the
// names after it and moves many connections. Frontends are numbered by
// TaskNumber when their names end in a task number, else by FrontendIndex,
// a hash of a stable id.
//
// Everything here is a pure function of its arguments: no state, no
// goroutines, deterministic across processes and platforms. The lots, the
// shuffles and the generator are part of the contract between clients:
// changing them changes every subset.
package subset
