package gossip

import "errors"

// Sentinel errors. Callers match them with errors.Is; the wrapped message
// says what was wrong and what to do about it.
var (
	// ErrConfig reports an invalid Config passed to Start.
	ErrConfig = errors.New("gossip: invalid config")
	// ErrInvalidPeer reports a Peer that cannot be advertised: an unknown
	// role, a task without a valid job or task name, a malformed RPC
	// address, or tags beyond serf's size limit.
	ErrInvalidPeer = errors.New("gossip: invalid peer identity")
	// ErrJoin reports that no given address could be joined.
	ErrJoin = errors.New("gossip: join failed")
	// ErrNameConflict reports that a live member at another address already
	// holds this node's name. The node is not a usable member: shut it down
	// and start again under a unique name, or retry the join if the other
	// holder is this task's previous incarnation (it is declared failed
	// within the failure-detection time, and its name is then free).
	ErrNameConflict = errors.New("gossip: node name already in use")
	// ErrNotEncrypted reports a keyring operation on a node that does not
	// encrypt gossip.
	ErrNotEncrypted = errors.New("gossip: encryption is off")
	// ErrKeyring reports a keyring operation that was malformed or that
	// not every member carried out.
	ErrKeyring = errors.New("gossip: keyring operation failed")
	// ErrClosed reports a call on a node that has been shut down.
	ErrClosed = errors.New("gossip: node is shut down")
)
