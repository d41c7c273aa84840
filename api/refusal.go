package api

import (
	"errors"

	"connectrpc.com/connect"
)

// RefusalHeader names, in an error's metadata, why an Assigner refused a
// task's call when the task should act on the reason rather than on the
// code alone. Values are the Refusal* constants.
const RefusalHeader = "Slicerd-Refusal"

// RefusalNotMember: the Assigner does not count the calling task as a live
// member of its job (gossip has not seen it, or, with identities, it has
// no registration there, as after a restart of the Assigner). The task
// registers again.
const RefusalNotMember = "not-member"

// RefusalNotAlive: the Assigner refused a task's registration because its
// gossip does not have the task's member alive. Right after the task joins
// that passes within a gossip round trip; if it lasts, gossip holds the
// member dead at an incarnation the task cannot outbid (a forged death
// message), and the task moves its gossip member to a new address, which
// gossip accepts for a dead member whatever its incarnation.
const RefusalNotAlive = "not-alive"

// RefusalOtherProcess: the Assigner refused a task's read lease because
// another process of the same task (another Slicelet instance: the task
// restarted while its previous process was paused or cut off) holds a
// live read. The task owns no key under that lease, and reads again once
// the other process's read was released or has expired.
const RefusalOtherProcess = "other-process"

// Refusal returns err's RefusalHeader value, "" if it has none.
func Refusal(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	return ce.Meta().Get(RefusalHeader)
}
