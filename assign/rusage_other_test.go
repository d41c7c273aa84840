//go:build !unix

package assign

// usage is not measured here: the benchmarks report zero faults.
func usage() (faults, sysMicros int64) { return 0, 0 }
