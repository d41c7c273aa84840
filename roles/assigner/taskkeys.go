package assigner

import (
	"fmt"
	"sync"
	"time"

	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/gossip"
)

// Tasks say which gossip keys they hold when they register, and take the
// Assigner's keys from the answer (RegisterTaskResponse.gossip_keys); an
// agent's keyring listing gathers what they said from every Assigner.

// taskKeysFresh is how long a task's report of its keys counts: the
// Slicelet registers with every Assigner every 30 s.
const taskKeysFresh = 2 * time.Minute

// maxTaskKeyIDs bounds the key IDs one registration may carry; a keyring
// holds a handful of keys, two or three during a rotation.
const maxTaskKeyIDs = 16

// maxTaskKeyReports bounds the reports kept: stale ones are dropped first,
// then new members are not recorded until some go stale.
const maxTaskKeyReports = 100_000

type taskKeyReport struct {
	ids []string
	at  time.Time
}

// taskKeyReports are the keys each task member said it held, by gossip
// member name.
type taskKeyReports struct {
	mu sync.Mutex
	m  map[string]taskKeyReport
}

// validateKeyIDs checks the key IDs of a registration: gossip.KeyID's
// form, at most maxTaskKeyIDs of them.
func validateKeyIDs(ids []string) error {
	if len(ids) > maxTaskKeyIDs {
		return fmt.Errorf("%d gossip key IDs; a task holds at most %d keys", len(ids), maxTaskKeyIDs)
	}
	for _, id := range ids {
		if len(id) != 16 {
			return fmt.Errorf("gossip key ID %q is not 16 hex digits", id)
		}
		for _, c := range id {
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return fmt.Errorf("gossip key ID %q is not 16 lowercase hex digits", id)
			}
		}
	}
	return nil
}

func (r *taskKeyReports) record(member string, ids []string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]taskKeyReport{}
	}
	if _, ok := r.m[member]; !ok && len(r.m) >= maxTaskKeyReports {
		for name, rep := range r.m {
			if now.Sub(rep.at) > taskKeysFresh {
				delete(r.m, name)
			}
		}
		if len(r.m) >= maxTaskKeyReports {
			return
		}
	}
	r.m[member] = taskKeyReport{ids: ids, at: now}
}

// ids returns the key IDs member last reported; nil if none.
func (r *taskKeyReports) ids(member string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[member].ids
}

// fresh returns the reports of the last taskKeysFresh.
func (r *taskKeyReports) fresh(now time.Time) []*slicerv1.TaskKeys {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*slicerv1.TaskKeys, 0, len(r.m))
	for name, rep := range r.m {
		if now.Sub(rep.at) > taskKeysFresh {
			delete(r.m, name)
			continue
		}
		out = append(out, &slicerv1.TaskKeys{Member: name, KeyIds: rep.ids, ReportedUnixMs: rep.at.UnixMilli()})
	}
	return out
}

// TaskKeys returns the gossip keys that tasks registered with this
// Assigner in the last two minutes said they held.
func (a *Assigner) TaskKeys() []*slicerv1.TaskKeys { return a.taskKeys.fresh(time.Now()) }

// keyringChangedFor reports whether this node's gossip keys differ from
// those task of job said it held when it last registered here. A task
// that never said (a Slicelet without keyring reports) is not told.
func (a *Assigner) keyringChangedFor(job, task string) bool {
	if a.gossipKeys == nil {
		return false
	}
	ids := a.taskKeys.ids(gossip.TaskMemberName(job, task))
	if len(ids) == 0 {
		return false
	}
	keys := a.gossipKeys()
	if len(keys) != len(ids) {
		return len(keys) > 0
	}
	for i, k := range keys {
		if gossip.KeyID(k) != ids[i] {
			return true
		}
	}
	return false
}

// gossipKeysForTask returns this node's gossip keys, base64, primary
// first, for a registration's answer; nil without gossip encryption.
func (a *Assigner) gossipKeysForTask() []string {
	if a.gossipKeys == nil {
		return nil
	}
	keys := a.gossipKeys()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = gossip.EncodeKey(k)
	}
	return out
}
