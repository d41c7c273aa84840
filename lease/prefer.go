package lease

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/slicerd/slicerd/gossip"
)

// Preference chooses each job's preferred Assigner: the one generating the
// job's assignments (Slicer §4.1). Assigners, Distributors and Slicelets
// all call Choose with what their own gossip member sees, so they agree
// whenever their views agree, and the hysteresis keeps them agreeing while
// the estimates jitter.
//
// The zero value of a field means DefaultPreference's.
type Preference struct {
	// Margin and MinGain are the hysteresis: another Assigner replaces the
	// current choice only when its estimated RTT to the job's tasks is
	// lower by more than Margin (a fraction of the current one's) and by
	// more than MinGain. Defaults 0.2 and 1 ms: network coordinates jitter
	// by a few percent and by a fraction of a millisecond on a LAN, so
	// neither alone flips the choice, while a move to another rack or zone
	// does.
	Margin  float64
	MinGain time.Duration
	// SampleTasks bounds how many of a job's tasks are measured (default
	// 32), so the cost does not grow with the job. The sample is the tasks
	// with the highest rendezvous hash with the job, so every member
	// samples the same ones and a task joining or leaving changes at most
	// one of them.
	SampleTasks int
	// Recheck is how often a member holding a choice re-evaluates it while
	// membership is quiet, since coordinates move without membership
	// events (default 1 s).
	Recheck time.Duration
}

// DefaultPreference returns the preference settings slicerd uses unless
// configured otherwise.
func DefaultPreference() Preference {
	return Preference{Margin: 0.2, MinGain: time.Millisecond, SampleTasks: 32, Recheck: time.Second}
}

// WithDefaults fills zero fields from DefaultPreference.
func (p Preference) WithDefaults() Preference {
	d := DefaultPreference()
	if p.Margin == 0 {
		p.Margin = d.Margin
	}
	if p.MinGain == 0 {
		p.MinGain = d.MinGain
	}
	if p.SampleTasks == 0 {
		p.SampleTasks = d.SampleTasks
	}
	if p.Recheck == 0 {
		p.Recheck = d.Recheck
	}
	return p
}

// Validate reports what is wrong with p, if anything. Zero fields are valid:
// they mean the defaults.
func (p Preference) Validate() error {
	switch {
	case !(p.Margin >= 0 && p.Margin < 1): // also rejects NaN
		return fmt.Errorf("%w: preference margin %g must be in [0, 1): the fraction by which another Assigner must be nearer to take a job over", ErrInvalid, p.Margin)
	case p.MinGain < 0:
		return fmt.Errorf("%w: preference minimum gain %v is negative; use zero for the default", ErrInvalid, p.MinGain)
	case p.SampleTasks < 0:
		return fmt.Errorf("%w: preference task sample %d is negative; use zero for the default", ErrInvalid, p.SampleTasks)
	case p.Recheck < 0:
		return fmt.Errorf("%w: preference recheck interval %v is negative; use zero for the default", ErrInvalid, p.Recheck)
	}
	return nil
}

// RTTFunc estimates the round-trip time between two members by name,
// reporting false when it has no estimate. gossip.Node.RTT is one.
type RTTFunc func(a, b string) (time.Duration, bool)

// score is one Assigner's distance to a job.
type score struct {
	rtt   time.Duration
	known bool
}

// Choose returns the preferred Assigner of job among assigners (the names
// of the live Assigners), given the names of the job's live tasks, an RTT
// estimator (nil: nothing is known) and current, the caller's previous
// choice ("" if none). It returns "" only when assigners is empty. It is a
// pure function of its arguments.
//
// An Assigner's distance to the job is the median estimated RTT from it to
// the job's (sampled) tasks. The median rather than the mean: a job's
// tasks usually sit mostly in one place, and the median follows where most
// of them are, while one far-away task or one bad estimate would drag a
// mean towards a compromise location that is near nobody.
//
// current is kept while it is live and no Assigner is nearer by more than
// the margin. Otherwise the choice is made afresh: among the Assigners the
// nearest one does not beat by the margin (all of them when no distance is
// known, as for a job without tasks or before coordinates converge), the
// one with the highest rendezvous hash of job and Assigner name. That
// spreads jobs evenly over equally near Assigners and moves as few jobs
// as possible when one comes or goes. Assigners with no known distance are
// left out when some are known, and never replace a live current choice.
func (p Preference) Choose(job string, assigners, tasks []string, rtt RTTFunc, current string) string {
	if len(assigners) == 0 {
		return ""
	}
	p = p.WithDefaults()
	var sampleBuf [64]string
	sample := sampleTasks(job, tasks, p.SampleTasks, sampleBuf[:0])
	var scoreBuf [8]score
	scores := scoreBuf[:0]
	var rttBuf [64]time.Duration
	best := -1
	cur := -1
	for i, a := range assigners {
		s := distance(a, sample, rtt, rttBuf[:0])
		scores = append(scores, s)
		if s.known && (best < 0 || s.rtt < scores[best].rtt) {
			best = i
		}
		if a == current {
			cur = i
		}
	}
	if cur >= 0 && (best < 0 || !scores[cur].known || !p.beats(scores[best].rtt, scores[cur].rtt)) {
		return current
	}
	var pick string
	var pickHash uint64
	for i, a := range assigners {
		if best >= 0 && (!scores[i].known || p.beats(scores[best].rtt, scores[i].rtt)) {
			continue
		}
		if h := rendezvous(job, a); pick == "" || h > pickHash || (h == pickHash && a < pick) {
			pick, pickHash = a, h
		}
	}
	return pick
}

// beats reports whether an Assigner at distance c is nearer than one at x
// by more than the hysteresis.
func (p Preference) beats(c, x time.Duration) bool {
	return float64(c) < float64(x)*(1-p.Margin) && x-c > p.MinGain
}

// distance is the median RTT from assigner to the tasks whose estimate is
// known; buf is scratch space.
func distance(assigner string, tasks []string, rtt RTTFunc, buf []time.Duration) score {
	if rtt == nil {
		return score{}
	}
	for _, t := range tasks {
		if d, ok := rtt(assigner, t); ok {
			buf = append(buf, d)
		}
	}
	if len(buf) == 0 {
		return score{}
	}
	slices.Sort(buf)
	n := len(buf)
	if n%2 == 1 {
		return score{rtt: buf[n/2], known: true}
	}
	return score{rtt: buf[n/2-1] + (buf[n/2]-buf[n/2-1])/2, known: true}
}

// sampleTasks returns tasks if there are at most limit of them, else the
// limit tasks with the highest rendezvous hash with job, appended to buf.
// It keeps the best so far in a sorted window: after the first few tasks a
// new one rarely enters it, so the cost is about one hash per task.
func sampleTasks(job string, tasks []string, limit int, buf []string) []string {
	if len(tasks) <= limit {
		return tasks
	}
	type hashed struct {
		h    uint64
		name string
	}
	var topBuf [64]hashed
	top := topBuf[:0] // sorted by descending hash, then name
	less := func(x, y hashed) bool { return x.h > y.h || (x.h == y.h && x.name < y.name) }
	for _, t := range tasks {
		x := hashed{rendezvous(job, t), t}
		if len(top) == limit && !less(x, top[limit-1]) {
			continue
		}
		i, _ := slices.BinarySearchFunc(top, x, func(e, x hashed) int {
			if less(e, x) {
				return -1
			}
			return 1
		})
		if len(top) == limit {
			top = top[:limit-1]
		}
		top = slices.Insert(top, i, x)
	}
	for _, x := range top {
		buf = append(buf, x.name)
	}
	return buf
}

// rendezvous is the highest-random-weight hash of a job and a member name.
func rendezvous(job, name string) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(job)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(name)
	return d.Sum64()
}

// Preferred applies Choose to a membership view: the Assigners a job may
// be given to (candidates), and the job's live tasks. It returns the
// chosen Assigner's gossip.Peer, or false when no Assigner is live.
func (p Preference) Preferred(job string, peers []gossip.Peer, rtt RTTFunc, current string) (gossip.Peer, bool) {
	var assignerBuf [8]string
	assigners := candidates(peers, assignerBuf[:0])
	var tasks []string
	for _, m := range peers {
		if m.Status == gossip.StatusAlive && m.Has(gossip.RoleTask) && m.Job == job {
			tasks = append(tasks, m.Name)
		}
	}
	name := p.Choose(job, assigners, tasks, rtt, current)
	for _, m := range peers {
		if m.Name == name && name != "" {
			return m, true
		}
	}
	return gossip.Peer{}, false
}

// PreferredIn is Preferred over a View: what the job's tasks cost, not a
// pass over every member.
func (p Preference) PreferredIn(job string, v *View, rtt RTTFunc, current string) (gossip.Peer, bool) {
	name := p.Choose(job, v.assigners, v.tasks[job], rtt, current)
	if name == "" {
		return gossip.Peer{}, false
	}
	return v.Peer(name)
}

// View is a membership read once and indexed for the preference of many
// jobs (Preference.PreferredIn, Choices.PreferredIn): the candidate
// Assigners, each job's alive tasks, and the members by name. Preferring
// each of n jobs by scanning every member costs n passes over the
// membership, and an Assigner or Distributor of thousands of jobs in a
// cluster of thousands of members spent seconds a check on it. A View is
// never modified.
type View struct {
	peers     []gossip.Peer
	assigners []string // candidates, in peers' order, as Preferred takes them
	sorted    []string // assigners, sorted
	tasks     map[string][]string
	byName    map[string]int
}

// NewView indexes peers, which it keeps (the caller does not modify them).
func NewView(peers []gossip.Peer) *View {
	v := &View{peers: peers, tasks: make(map[string][]string), byName: make(map[string]int, len(peers))}
	v.assigners = candidates(peers, nil)
	v.sorted = slices.Sorted(slices.Values(v.assigners))
	for i, m := range peers {
		if _, ok := v.byName[m.Name]; !ok {
			v.byName[m.Name] = i // the first, as a scan finds it
		}
		if m.Status == gossip.StatusAlive && m.Has(gossip.RoleTask) {
			v.tasks[m.Job] = append(v.tasks[m.Job], m.Name)
		}
	}
	return v
}

// Peers returns the members the View was made of.
func (v *View) Peers() []gossip.Peer { return v.peers }

// Peer returns the member named name.
func (v *View) Peer(name string) (gossip.Peer, bool) {
	i, ok := v.byName[name]
	if !ok {
		return gossip.Peer{}, false
	}
	return v.peers[i], true
}

// candidates appends to buf the names of the Assigners in peers that a job
// may be given to: the live ones that advertise an RPC address, less those
// whose network coordinate is still settling (gossip.Peer.Settling) while
// one whose coordinate has settled is live. An Assigner that has just
// started has a coordinate every member sees differently, and that moves
// a long way over its first probes; choosing by it would have members
// disagree, and choices flap, until it settles. Leaving it out, as every
// member does from the same tag, keeps them agreed; when it settles the
// set of candidates changes for all of them at once, and they choose
// afresh together (Choices). While no live Assigner has settled (a whole
// cluster just started) every live one is a candidate.
func candidates(peers []gossip.Peer, buf []string) []string {
	settled := false
	for _, m := range peers {
		if isAssigner(m) && !m.Settling {
			settled = true
			break
		}
	}
	for _, m := range peers {
		if isAssigner(m) && (!settled || !m.Settling) {
			buf = append(buf, m.Name)
		}
	}
	return buf
}

// isAssigner reports whether m is a live Assigner that serves RPCs.
func isAssigner(m gossip.Peer) bool {
	return m.Status == gossip.StatusAlive && m.Has(gossip.RoleAssigner) && m.RPCAddr != ""
}

// Choices is one observer's memory of the Assigner it prefers for each job:
// the current choice that Choose keeps under its hysteresis. It forgets
// every choice whenever the set of candidate Assigners changes, so that
// after an Assigner joins, leaves, fails, comes back from a partition or
// has settled after a restart, every observer chooses afresh from the same
// inputs and they agree again, even if their earlier histories differed.
// The zero value is ready to use and it is safe for concurrent use.
type Choices struct {
	mu   sync.Mutex
	set  []string          // candidate Assigners when the remembered choices were made, sorted
	gen  uint64            // bumped whenever set changes
	prev map[string]string // job → chosen Assigner
}

// Preferred returns job's preferred Assigner among peers, remembering it
// as the current choice for the next call. It returns false when no
// Assigner is live.
//
// The choice is computed outside the lock (the RTT estimator may be slow),
// and remembered only if nothing changed meanwhile: had another call seen
// a different set of Assigners, or the job's choice been changed or
// forgotten, the choice made here rests on an older view and would
// overwrite a newer one.
func (c *Choices) Preferred(p Preference, job string, peers []gossip.Peer, rtt RTTFunc) (gossip.Peer, bool) {
	var assignerBuf [8]string
	assigners := candidates(peers, assignerBuf[:0])
	slices.Sort(assigners)
	return c.remember(job, assigners, func(current string) (gossip.Peer, bool) { return p.Preferred(job, peers, rtt, current) })
}

// PreferredIn is Preferred over a View.
func (c *Choices) PreferredIn(p Preference, job string, v *View, rtt RTTFunc) (gossip.Peer, bool) {
	return c.remember(job, v.sorted, func(current string) (gossip.Peer, bool) { return p.PreferredIn(job, v, rtt, current) })
}

// remember makes a choice for job with choose, given the one remembered,
// among the candidate Assigners set (sorted), and remembers it.
func (c *Choices) remember(job string, set []string, choose func(current string) (gossip.Peer, bool)) (gossip.Peer, bool) {
	c.mu.Lock()
	if !slices.Equal(set, c.set) {
		c.set = slices.Clone(set)
		c.gen++
		clear(c.prev)
	}
	gen := c.gen
	current := c.prev[job]
	c.mu.Unlock()
	chosen, ok := choose(current)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen || c.prev[job] != current {
		return chosen, ok
	}
	if c.prev == nil {
		c.prev = make(map[string]string)
	}
	if ok {
		c.prev[job] = chosen.Name
	} else {
		delete(c.prev, job)
	}
	return chosen, ok
}

// Current returns the remembered choice for job, "" if none.
func (c *Choices) Current(job string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.prev[job]
}

// Forget drops the remembered choice for job, so the next call chooses
// afresh, as an observer without history would.
func (c *Choices) Forget(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.prev, job)
}

// Remember makes name the remembered choice for job, as if Preferred had
// chosen it: the hysteresis then keeps it unless another Assigner is
// nearer by more than the margin. The Leader remembers the holder of a
// job's lease this way, so that an Assigner whose estimates only slightly
// favour itself defers to the one already writing the job.
func (c *Choices) Remember(job, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prev == nil {
		c.prev = make(map[string]string)
	}
	c.prev[job] = name
}
