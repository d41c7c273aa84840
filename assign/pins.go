package assign

import (
	"cmp"
	"fmt"
	"slices"
)

// activePin is a pin whose task is live and not draining.
type activePin struct {
	start, end SliceKey
	task       int32
	reason     string
}

// activePins returns the configuration's pins whose tasks are live and not
// draining, in key order.
func (p *planner) activePins() []activePin {
	var out []activePin
	for _, pin := range p.cfg.Pins {
		i, ok := slices.BinarySearchFunc(p.live, pin.Task, func(t Task, name string) int { return cmp.Compare(t.Name, name) })
		if ok && !p.live[i].Draining {
			out = append(out, activePin{start: pin.Start, end: pin.End, task: int32(i), reason: pin.Reason})
		}
	}
	return out
}

// pinnedTo returns the task an active pin overlapping [start, end) pins
// its keys to, or -1.
func (p *planner) pinnedTo(start, end SliceKey) int32 {
	i, _ := slices.BinarySearchFunc(p.pins, start, func(a activePin, k SliceKey) int {
		if a.end <= k {
			return -1
		}
		return 1
	})
	if i < len(p.pins) && p.pins[i].start < end {
		return p.pins[i].task
	}
	return -1
}

// pinBound reports whether k is the start or end of an active pin.
func (p *planner) pinBound(k SliceKey) bool {
	i, _ := slices.BinarySearchFunc(p.pins, k, func(a activePin, k SliceKey) int { return cmp.Compare(a.end, k) })
	return i < len(p.pins) && (p.pins[i].end == k || p.pins[i].start == k) || i+1 < len(p.pins) && p.pins[i+1].start == k
}

// applyPins makes every active pin's keys served by its task: the slices
// are split at the pin's bounds, and each slice of its range that the task
// does not serve gets it in place of its most loaded task. A pin wins over
// cordons, memory limits and load; it is the operator's word.
func (p *planner) applyPins() {
	for _, pin := range p.pins {
		p.splitAt(pin.start)
		p.splitAt(pin.end)
		si, _ := slices.BinarySearchFunc(p.slices, pin.start, func(s wslice, k SliceKey) int { return cmp.Compare(s.start, k) })
		for ; si < len(p.slices) && p.slices[si].start < pin.end; si++ {
			s := &p.slices[si]
			if p.has(s, pin.task) {
				continue
			}
			reason := fmt.Sprintf("pinned to task %q by an operator", p.live[pin.task].Name)
			if pin.reason != "" {
				reason += ": " + pin.reason
			}
			ts := p.tasks(s)
			if len(ts) == 0 {
				p.addTask(si, pin.task)
				p.move(AddReplica, s, -1, pin.task, reason)
				continue
			}
			from := ts[0]
			for _, t := range ts[1:] {
				if p.load[t] > p.load[from] {
					from = t
				}
			}
			p.removeTask(si, from)
			p.addTask(si, pin.task)
			p.move(Reassign, &p.slices[si], from, pin.task, reason)
		}
	}
}

// splitAt splits the slice holding key k so that one starts at k.
func (p *planner) splitAt(k SliceKey) {
	if k == 0 || k >= KeySpaceEnd {
		return
	}
	si, found := slices.BinarySearchFunc(p.slices, k, func(s wslice, k SliceKey) int { return cmp.Compare(s.start, k) })
	if found {
		return
	}
	p.split(si-1, k)
}
