//go:build failpoints && unix

package failpoint

import "syscall"

func stopSelf() { _ = syscall.Kill(syscall.Getpid(), syscall.SIGSTOP) }
