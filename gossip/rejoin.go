package gossip

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/slicerd/slicerd/internal/atomicfile"
)

// Rejoining after a restart (Config.RejoinFile). Joining any one live
// member is enough: the push-pull exchange of a join brings the whole
// member list. So the file keeps a small random sample of live members,
// and a starting node tries them one at a time.
const (
	// rejoinSample bounds the addresses kept.
	rejoinSample = 16
	// rejoinRecordEvery paces rewrites of the file while membership
	// changes.
	rejoinRecordEvery = time.Second
	// maxRejoinFile bounds what is read back: a file larger than this
	// was not written by slicerd.
	maxRejoinFile = 64 << 10
)

// readRejoinFile returns the addresses in path; a missing file is none.
func readRejoinFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) > maxRejoinFile {
		return nil, errors.New("it is larger than any slicerd writes")
	}
	var addrs []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := validateJoinAddr(line); err != nil {
			return nil, err
		}
		addrs = append(addrs, line)
	}
	return addrs, sc.Err()
}

// writeRejoinFile replaces path with addrs, durably.
func writeRejoinFile(path string, addrs []string) error {
	var b strings.Builder
	b.WriteString("# gossip members this slicerd node last saw alive; it joins them when it starts\n")
	for _, a := range addrs {
		b.WriteString(a + "\n")
	}
	return atomicfile.WriteFile(path, []byte(b.String()), 0o600)
}

// rejoin joins the first of addrs that answers, one at a time, until one
// does or the node stops. It runs once, at Start, in a goroutine of the
// node's WaitGroup.
func (n *Node) rejoin(addrs []string) {
	for _, a := range addrs {
		select {
		case <-n.stop:
			return
		default:
		}
		if a == n.addr {
			continue
		}
		if _, err := n.Join([]string{a}); err == nil {
			n.log.Info("gossip rejoined a member known before the restart", "member_addr", a)
			return
		}
	}
	n.log.Info("gossip: none of the members known before the restart answered; waiting to be joined", "tried", len(addrs))
}

// recordMembers keeps RejoinFile up to date until the node stops: at a
// membership change it writes a sample of the live members' addresses at
// once, or, within rejoinRecordEvery of the last write, at the end of that
// interval. A goroutine of the node's WaitGroup.
func (n *Node) recordMembers() {
	changes, unsubscribe := n.Changes()
	defer unsubscribe()
	tick := time.NewTicker(rejoinRecordEvery)
	defer tick.Stop()
	var (
		dirty   bool
		written time.Time
	)
	var sample []string // the addresses last written, sorted
	record := func() {
		dirty = false
		next := nextSample(sample, n.liveAddrs())
		if len(next) == 0 || slices.Equal(next, sample) {
			return // unchanged, or an empty view (alone, or leaving): the file stays
		}
		if err := writeRejoinFile(n.cfg.RejoinFile, next); err != nil {
			n.log.Warn("gossip: recording the members to rejoin after a restart failed", "file", n.cfg.RejoinFile, "err", err)
			return
		}
		sample, written = next, time.Now()
	}
	// A change before the subscription above sent no signal here: what it
	// changed is read now.
	record()
	for {
		select {
		case <-n.stop:
			return
		case <-changes:
			if time.Since(written) >= rejoinRecordEvery {
				record()
			} else {
				dirty = true
			}
		case <-tick.C:
			if dirty {
				record()
			}
		}
	}
}

// liveAddrs returns the gossip addresses of the live members other than
// this node.
func (n *Node) liveAddrs() map[string]bool {
	addrs := map[string]bool{}
	for _, p := range n.Peers() {
		if p.Status == StatusAlive && p.Name != n.cfg.NodeName && p.GossipAddr != "" {
			addrs[p.GossipAddr] = true
		}
	}
	return addrs
}

// nextSample is the sample of live addresses to record: those of prev that
// are still live, filled up to rejoinSample with others at random, sorted.
// Keeping the members still live means a change elsewhere in a large
// cluster leaves the file alone.
func nextSample(prev []string, live map[string]bool) []string {
	next := make([]string, 0, rejoinSample)
	for _, a := range prev {
		if live[a] && len(next) < rejoinSample {
			next = append(next, a)
			delete(live, a)
		}
	}
	for a := range live { // map order: a random fill
		if len(next) == rejoinSample {
			break
		}
		next = append(next, a)
	}
	slices.Sort(next)
	return next
}
