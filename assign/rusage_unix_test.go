//go:build unix

package assign

import "syscall"

// usage is the process's minor page faults and system CPU time (in
// microseconds) so far: what fresh memory has cost it.
func usage() (faults, sysMicros int64) {
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		return 0, 0
	}
	return int64(r.Minflt), r.Stime.Nano() / 1000
}
