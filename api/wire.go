package api

import (
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/slicerd/slicerd/assign"
)

// Field numbers of the messages AppendWatchResponse writes, as in
// api/proto/slicer/v1/slicer.proto.
const (
	fieldResponseAssignment = 1
	fieldResponseCommitted  = 3

	fieldAssignmentJob         = 1
	fieldAssignmentGeneration  = 2
	fieldAssignmentTasks       = 3
	fieldAssignmentSlices      = 4
	fieldAssignmentIncarnation = 5

	fieldTaskName    = 1
	fieldTaskAddress = 2

	fieldSliceStart = 1
	fieldSliceEnd   = 2
	fieldSliceTasks = 3
)

// AppendWatchResponse appends to b the protobuf encoding of the
// WatchAssignmentResponse that brings the whole of a, committed at
// committedUnixNano (see CommittedUnixNano), byte for byte what
// proto.Marshal makes of
//
//	&slicerv1.WatchAssignmentResponse{Assignment: ToProto(a), CommittedUnixNano: committedUnixNano}
//
// without building that message: at a million slices it is a million
// small messages, some 100 MB, where the encoding is about 30 MB.
func AppendWatchResponse(b []byte, a *assign.Assignment, committedUnixNano int64) []byte {
	n := assignmentSize(a)
	size := protowire.SizeTag(fieldResponseAssignment) + protowire.SizeBytes(n)
	if committedUnixNano != 0 {
		size += protowire.SizeTag(fieldResponseCommitted) + protowire.SizeVarint(uint64(committedUnixNano))
	}
	b = slices.Grow(b, size)
	b = protowire.AppendTag(b, fieldResponseAssignment, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = appendString(b, fieldAssignmentJob, a.Job)
	b = appendUint(b, fieldAssignmentGeneration, a.Generation)
	for i := range a.Tasks {
		t := &a.Tasks[i]
		b = protowire.AppendTag(b, fieldAssignmentTasks, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(taskSize(t)))
		b = appendString(b, fieldTaskName, t.Name)
		b = appendString(b, fieldTaskAddress, t.Addr)
	}
	for i := range a.Slices {
		s := &a.Slices[i]
		b = protowire.AppendTag(b, fieldAssignmentSlices, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sliceSize(s)))
		b = appendUint(b, fieldSliceStart, s.Start)
		b = appendUint(b, fieldSliceEnd, s.End)
		for _, name := range s.Tasks {
			// A repeated string writes every element, empty or not.
			b = protowire.AppendTag(b, fieldSliceTasks, protowire.BytesType)
			b = protowire.AppendString(b, name)
		}
	}
	b = appendString(b, fieldAssignmentIncarnation, a.Incarnation)
	if committedUnixNano != 0 {
		b = protowire.AppendTag(b, fieldResponseCommitted, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(committedUnixNano))
	}
	return b
}

// assignmentSize is the length of a's Assignment message.
func assignmentSize(a *assign.Assignment) int {
	n := stringSize(fieldAssignmentJob, a.Job) + uintSize(fieldAssignmentGeneration, a.Generation) +
		stringSize(fieldAssignmentIncarnation, a.Incarnation)
	for i := range a.Tasks {
		n += protowire.SizeTag(fieldAssignmentTasks) + protowire.SizeBytes(taskSize(&a.Tasks[i]))
	}
	for i := range a.Slices {
		n += protowire.SizeTag(fieldAssignmentSlices) + protowire.SizeBytes(sliceSize(&a.Slices[i]))
	}
	return n
}

func taskSize(t *assign.Task) int {
	return stringSize(fieldTaskName, t.Name) + stringSize(fieldTaskAddress, t.Addr)
}

func sliceSize(s *assign.Slice) int {
	n := uintSize(fieldSliceStart, s.Start) + uintSize(fieldSliceEnd, s.End)
	for _, name := range s.Tasks {
		n += protowire.SizeTag(fieldSliceTasks) + protowire.SizeBytes(len(name))
	}
	return n
}

// A proto3 scalar or string field is written only when it is not zero or
// empty.

func stringSize(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func uintSize(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}
