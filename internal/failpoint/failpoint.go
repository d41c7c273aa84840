package failpoint

import "errors"

// ErrInjected is wrapped by the error a point's error action returns.
var ErrInjected = errors.New("failpoint: injected error")

// ErrDisabled is returned by Enable in a build without the failpoints tag.
var ErrDisabled = errors.New("failpoint: not compiled in; build with -tags failpoints")

// CrashExit is the exit status of a process crashed by a point, told
// apart from any status slicerd exits with by itself.
const CrashExit = 86

// Env names the variable that arms points at start; AddrEnv the one that
// opens the control endpoint.
const (
	Env     = "SLICERD_FAILPOINTS"
	AddrEnv = "SLICERD_FAILPOINTS_ADDR"
)
