package benchproc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Memory returns the resident memory of process pid and its peak (VmRSS
// and VmHWM of /proc/PID/status) in KiB, or -1 when they cannot be read.
func Memory(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	rss, hwm = -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm
}

// CPUTime returns the user and system CPU time process pid has used, or 0
// when it cannot be read.
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)        // field 14
	st, _ := strconv.ParseInt(f[12], 10, 64)        // field 15
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// WriteCalls returns the write system calls process pid has made (syscw
// of /proc/PID/io), or -1 when they cannot be read.
func WriteCalls(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
