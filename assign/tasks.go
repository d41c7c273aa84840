package assign

import (
	"fmt"
	"slices"
	"strings"
)

// MaxTaskAddrLen bounds a task's address. host:port with the longest DNS
// name fits with room to spare; the bound keeps encodings small and lets a
// decoder refuse absurd lengths before allocating.
const MaxTaskAddrLen = 1024

// sortedTasks validates the live tasks of a job and returns them sorted by
// name, as a copy: callers may pass tasks in any order and keep their slice.
func sortedTasks(job string, tasks []Task) ([]Task, error) {
	if len(tasks) == 0 {
		return nil, fmt.Errorf("%w: job %q has no live task to assign keys to; start at least one task", ErrNoTasks, job)
	}
	out := slices.Clone(tasks)
	slices.SortFunc(out, func(a, b Task) int { return strings.Compare(a.Name, b.Name) })
	for i, t := range out {
		if err := ValidateTaskName(t.Name); err != nil {
			return nil, fmt.Errorf("job %q: %w", job, err)
		}
		if len(t.Addr) > MaxTaskAddrLen {
			return nil, fmt.Errorf("%w: job %q: task %q has a %d-byte address; the limit is %d", ErrInvalidAddr, job, t.Name, len(t.Addr), MaxTaskAddrLen)
		}
		if err := ValidateCapacity(t.Capacity); err != nil {
			return nil, fmt.Errorf("job %q: task %q: %w", job, t.Name, err)
		}
		if err := ValidateMemoryLimit(t.MemoryLimit); err != nil {
			return nil, fmt.Errorf("job %q: task %q: %w", job, t.Name, err)
		}
		if i > 0 && out[i-1].Name == t.Name {
			return nil, fmt.Errorf("%w: job %q: task %q is listed twice; task names must be unique within a job", ErrInvalidName, job, t.Name)
		}
	}
	giveWay(out)
	return out, nil
}

// giveWay clears the marks of ts where keys would have no owner: with no
// task open for new slices, cordons give way, and with every task
// draining, draining does.
func giveWay(ts []Task) {
	for _, clear := range []func(*Task){func(t *Task) { t.Cordoned = false }, func(t *Task) { t.Draining = false }} {
		if slices.ContainsFunc(ts, Task.open) {
			break
		}
		for i := range ts {
			clear(&ts[i])
		}
	}
}

// staying returns the tasks of ts (sorted) that are not draining: all of
// them when none is, without copying.
func staying(ts []Task) []Task {
	if !slices.ContainsFunc(ts, func(t Task) bool { return t.Draining }) {
		return ts
	}
	return slices.DeleteFunc(slices.Clone(ts), func(t Task) bool { return t.Draining })
}

// openTasks returns the tasks of ts (sorted) that are open for new
// slices; sortedTasks leaves at least one.
func openTasks(ts []Task) []Task {
	if !slices.ContainsFunc(ts, func(t Task) bool { return !t.open() }) {
		return ts
	}
	return slices.DeleteFunc(slices.Clone(ts), func(t Task) bool { return !t.open() })
}
