package storage

import "context"

// Watcher is implemented by a Store that can report changes as they are
// committed, so that a Backup or a standby Assigner reacts to a commit
// without polling. Callers check for it with a type assertion and poll
// Load when the store does not offer it.
type Watcher interface {
	// Watch delivers the names of jobs whose record (assignment or config)
	// changed after Watch returned, a deletion included: only job's when
	// job is non-empty, every job's when it is "". Notifications are
	// coalesced, so one name may stand for several changes: the receiver
	// Loads to see the state. When the store cannot tell what it missed (a
	// lost connection, history compacted away), it delivers every watched
	// name once the watch is back: every job it holds and every job it
	// deleted (it remembers their names; see Delete), so that a receiver
	// still serving a job deleted meanwhile reads it gone. The channel is
	// closed when ctx ends or the store is closed.
	Watch(ctx context.Context, job string) <-chan string
}
