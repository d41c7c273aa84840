package rpc

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/slicerd/slicerd/api"
)

// A refusal of a non-member says so in the error's metadata, which the
// Slicelet reads to register again.
func TestNotMemberRefusal(t *testing.T) {
	err := ToConnect(fmt.Errorf("%w: task %q", ErrNotMember, "t0"))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || api.Refusal(err) != api.RefusalNotMember {
		t.Fatalf("ToConnect(ErrNotMember) = %v with refusal %q; want FAILED_PRECONDITION, %q", err, api.Refusal(err), api.RefusalNotMember)
	}
	if r := api.Refusal(ToConnect(ErrLiveTasks)); r != "" {
		t.Errorf("another FAILED_PRECONDITION carries refusal %q", r)
	}
}
