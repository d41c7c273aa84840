package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slicerd/slicerd/lease/leasecheck"
)

// monotonic reads CLOCK_MONOTONIC, which every process on the machine
// shares, so that the records of several tasks compare.
func monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("kvserver: CLOCK_MONOTONIC: %v", err))
	}
	return ts.Nano()
}

// record appends satisfied requests to a file (leasecheck.AppendRecord),
// one line and one write
// each, unbuffered: a task killed with SIGKILL loses none, since what it
// served last is what the check most needs.
type record struct {
	task string
	mu   sync.Mutex
	f    *os.File
	buf  []byte
}

func openRecord(path, task string) (*record, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &record{task: task, f: f}, nil
}

func (r *record) add(key string, token uint64, start, end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = leasecheck.AppendRecord(r.buf[:0], leasecheck.Op{Task: r.task, Key: key, Token: token,
		Start: time.Duration(start), End: time.Duration(end)})
	r.f.Write(r.buf)
}

func (r *record) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.f.Close()
}
