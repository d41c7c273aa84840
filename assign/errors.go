package assign

import "errors"

// Sentinel errors. Callers match them with errors.Is; the wrapped message
// says where the problem is.
var (
	ErrInvalidAssignment  = errors.New("assign: invalid assignment")
	ErrInvalidConfig      = errors.New("assign: invalid job config")
	ErrInvalidName        = errors.New("assign: invalid name")
	ErrNoTasks            = errors.New("assign: no live tasks")
	ErrCorruptEncoding    = errors.New("assign: corrupt assignment encoding")
	ErrInvalidAddr        = errors.New("assign: invalid task address")
	ErrInvalidCapacity    = errors.New("assign: invalid task capacity")
	ErrInvalidMemoryLimit = errors.New("assign: invalid task memory limit")
)
