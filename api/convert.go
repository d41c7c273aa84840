package api

import (
	"fmt"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// ToProto converts a model assignment to its wire form.
func ToProto(a *assign.Assignment) *slicerv1.Assignment {
	if a == nil {
		return nil
	}
	p := &slicerv1.Assignment{
		Job:        a.Job,
		Generation: a.Generation,
		Tasks:      make([]*slicerv1.Task, len(a.Tasks)),
		Slices:     make([]*slicerv1.Slice, len(a.Slices)),
	}
	for i, t := range a.Tasks {
		p.Tasks[i] = &slicerv1.Task{Name: t.Name, Address: t.Addr}
	}
	for i, s := range a.Slices {
		p.Slices[i] = &slicerv1.Slice{Start: s.Start, End: s.End, Tasks: append([]string(nil), s.Tasks...)}
	}
	return p
}

// FromProto converts a wire assignment to the model and validates it, so a
// malformed message from the network never reaches a routing table.
func FromProto(p *slicerv1.Assignment) (*assign.Assignment, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: message has no assignment", assign.ErrInvalidAssignment)
	}
	a := &assign.Assignment{
		Job:        p.GetJob(),
		Generation: p.GetGeneration(),
		Tasks:      make([]assign.Task, len(p.GetTasks())),
		Slices:     make([]assign.Slice, len(p.GetSlices())),
	}
	for i, t := range p.GetTasks() {
		a.Tasks[i] = assign.Task{Name: t.GetName(), Addr: t.GetAddress()}
	}
	for i, s := range p.GetSlices() {
		a.Slices[i] = assign.Slice{Start: s.GetStart(), End: s.GetEnd(), Tasks: append([]string(nil), s.GetTasks()...)}
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// ConfigToProto converts a job configuration to its wire form.
func ConfigToProto(c assign.Config) *slicerv1.JobConfig {
	return &slicerv1.JobConfig{MinRedundancy: uint32(c.MinRedundancy), MaxRedundancy: uint32(c.MaxRedundancy)}
}

// ConfigFromProto converts and validates a wire job configuration.
func ConfigFromProto(p *slicerv1.JobConfig) (assign.Config, error) {
	if p == nil {
		return assign.Config{}, fmt.Errorf("%w: request has no config", assign.ErrInvalidConfig)
	}
	c := assign.Config{MinRedundancy: int(p.GetMinRedundancy()), MaxRedundancy: int(p.GetMaxRedundancy())}
	if p.GetMinRedundancy() > assign.MaxRedundancyLimit || p.GetMaxRedundancy() > assign.MaxRedundancyLimit {
		return assign.Config{}, fmt.Errorf("%w: redundancy %d/%d is above the limit of %d", assign.ErrInvalidConfig, p.GetMinRedundancy(), p.GetMaxRedundancy(), assign.MaxRedundancyLimit)
	}
	return c, c.Validate()
}
