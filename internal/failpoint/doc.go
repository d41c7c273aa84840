// Package failpoint names the places in slicerd's processes where a test
// or a benchmark's nemesis can make a step pause, fail or crash the
// process: every step of a guard move (lease/guard), the job lease's
// renewal (lease.Leader) and the assignment commit (roles/assigner).
//
// Points exist only in binaries built with the failpoints build tag:
//
//	go build -tags failpoints .
//
// Without the tag, Hit is an empty function the compiler inlines away,
// Enable returns ErrDisabled, and nothing reads the environment or opens
// a socket: a release build cannot be made to fail by any setting. With
// the tag, Hit costs one atomic load while no point is enabled.
//
// A failpoints build arms points from the environment at start:
//
//	SLICERD_FAILPOINTS='guard/after-recall-guard=1*stop;lease/before-renew=error'
//
// and, when SLICERD_FAILPOINTS_ADDR names a loopback address, serves a
// control endpoint there for changing them while it runs (no
// authentication: a failpoints build is for test beds only):
//
//	curl -X PUT -d '1*pause(3s)' http://127.0.0.1:PORT/guard/before-wait-guard
//	curl -X DELETE http://127.0.0.1:PORT/guard/before-wait-guard
//	curl http://127.0.0.1:PORT/
//
// An action is [N*]KIND[(ARG)], fired at most N times when N is given:
//
//	pause(D)   the calling goroutine waits D, or until its context ends
//	error      Hit returns an error wrapping ErrInjected
//	crash      the process exits at once with status CrashExit
//	stop       the process sends itself SIGSTOP; whoever watches it
//	           continues it with SIGCONT
//	off        nothing (disarms the point)
//
// Before acting, a point writes "failpoint: NAME fired: ACTION" to
// standard error, so a harness reading the process's output knows when
// (and that) the fault happened.
package failpoint
