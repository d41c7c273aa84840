// Package sim replays load traces through slicerd's sharding algorithms, so
// their balance and churn can be measured and compared offline, the way the
// Slicer paper's evaluation (§5.2) compares weighted-move with static and
// consistent-hash sharding.
//
// A trace is one JSON object per line, windows in non-decreasing order:
//
//	{"window":0,"tasks":["t0","t1","t2"]}
//	{"window":0,"key":"user:42","load":12.5}
//
// A tasks line sets the live tasks from its window on; one must come before
// the first load line, and more may follow to remove or add tasks. A load
// line is the load one application key generated in that window. Reader
// parses traces line by line and rejects anything it does not understand,
// naming the line.
//
// Replay takes one decision per window: the window's key loads, hashed to
// slice keys as Slicelets report them, go to the algorithm with the
// previous assignment and the live tasks. Each decision is printed as a
// JSON line with its imbalance (max over mean task load, under that
// window's load) and churn (the fraction of the key space that gained a
// task), and a summary line closes the output. Generate writes synthetic
// traces (power-law, zipf, diurnal, failures), deterministic for a seed.
// Nothing here starts a goroutine or touches the network.
package sim
