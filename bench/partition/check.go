package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/etcdstore"
)

// commit is one assignment the store took, as read back from etcd: the
// revision of the write, the generation it stored, the job lease at that
// revision (its epoch, the lease key's create revision, and its holder's
// name), and the Assigner the decision's history entry names.
type commit struct {
	Revision   int64  `json:"revision"`
	Generation uint64 `json:"generation"`
	Epoch      int64  `json:"epoch"`
	Holder     string `json:"holder"`
	Assigner   string `json:"assigner"`
}

// storeHistory is what the store's history of a job says.
type storeHistory struct {
	Job        string   `json:"job"`
	Commits    int      `json:"commits"`
	Epochs     int      `json:"epochs"`
	Violations []string `json:"violations,omitempty"`
}

// readCommits walks the job's current-assignment key back through etcd's
// revisions (no compaction runs on the bed's etcd): every value it held
// is a commit, in the transaction that also wrote the decision's history
// entry, fenced on the job lease. It returns them oldest first.
func readCommits(ctx context.Context, cli *clientv3.Client, job string) ([]commit, error) {
	cur := storePrefix + "jobs/" + job + "/current"
	lease := storePrefix + "leases/" + job + "/job"
	var out []commit
	rev := int64(0) // 0: the newest
	for {
		opts := []clientv3.OpOption{}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, cur, opts...)
		if err != nil {
			return nil, fmt.Errorf("read %s at revision %d: %w", cur, rev, err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		kv := resp.Kvs[0]
		gen, err := etcdstore.StoredGeneration(job, kv.Value)
		if err != nil {
			return nil, fmt.Errorf("%s at revision %d does not decode: %v", cur, kv.ModRevision, err)
		}
		c := commit{Revision: kv.ModRevision, Generation: gen}
		lr, err := cli.Get(ctx, lease, clientv3.WithRev(kv.ModRevision))
		if err != nil {
			return nil, fmt.Errorf("read %s at revision %d: %w", lease, kv.ModRevision, err)
		}
		if len(lr.Kvs) > 0 {
			c.Epoch, c.Holder = lr.Kvs[0].CreateRevision, string(lr.Kvs[0].Value)
		}
		hk := storePrefix + "history/" + job + "/" + storage.HistoryKeyHex(c.Generation)
		hr, err := cli.Get(ctx, hk, clientv3.WithRev(kv.ModRevision))
		if err != nil {
			return nil, fmt.Errorf("read %s at revision %d: %w", hk, kv.ModRevision, err)
		}
		if len(hr.Kvs) > 0 && hr.Kvs[0].ModRevision == kv.ModRevision {
			if e, err := storage.DecodeHistoryEntry(hr.Kvs[0].Value); err == nil {
				c.Assigner = e.Assigner
			}
		}
		out = append(out, c)
		rev = kv.ModRevision - 1
		if rev <= 0 {
			break
		}
	}
	slices.Reverse(out)
	return out, nil
}

// checkCommits holds a job's commits to the store's promises: generations
// that only go up; every commit made under a job lease, by its holder (the
// Assigner its history entry names); epochs that never go back; and one
// holder per epoch.
func checkCommits(job string, cs []commit) storeHistory {
	h := storeHistory{Job: job, Commits: len(cs)}
	bad := func(format string, args ...any) {
		if len(h.Violations) < 20 {
			h.Violations = append(h.Violations, fmt.Sprintf(format, args...))
		}
	}
	holders := map[int64]string{}
	for i, c := range cs {
		if i > 0 {
			p := cs[i-1]
			if c.Generation <= p.Generation {
				bad("generation %d at revision %d follows generation %d at revision %d", c.Generation, c.Revision, p.Generation, p.Revision)
			}
			if c.Epoch != 0 && c.Epoch < p.Epoch {
				bad("generation %d committed under epoch %d after generation %d under the later epoch %d", c.Generation, c.Epoch, p.Generation, p.Epoch)
			}
		}
		switch {
		case c.Epoch == 0:
			bad("generation %d (revision %d) was committed while nobody held the job lease", c.Generation, c.Revision)
		case c.Assigner != "" && c.Assigner != c.Holder:
			bad("generation %d was decided by %s under epoch %d, held by %s", c.Generation, c.Assigner, c.Epoch, c.Holder)
		}
		if c.Epoch != 0 {
			if prev, ok := holders[c.Epoch]; ok && prev != c.Holder {
				bad("epoch %d held by both %s and %s", c.Epoch, prev, c.Holder)
			}
			holders[c.Epoch] = c.Holder
		}
	}
	h.Epochs = len(holders)
	return h
}

// Convergence, concretely: for each job, a running slicerd node holds the
// job's lease (so an Assigner generates the job), every running node's
// Distributor serves the generation the store holds, the clients' Clerk
// holds it too, the stored assignment names exactly the job's running
// tasks, and a probe request on each of probeKeys keys succeeds.
const probeKeys = 8

// noHolder says that no running node holds a job's lease.
const noHolder = "no running slicerd node holds the job's lease"

// converged reports whether the cluster has converged, and if not, why.
func (c *cluster) converged(ctx context.Context) (bool, string) {
	for _, job := range []string{strongJob, affinityJob} {
		holder, err := c.leaseHolder(ctx, job)
		if err != nil {
			return false, err.Error()
		}
		if p := c.proc(holder); p == nil || !p.running() {
			return false, fmt.Sprintf("job %s: %s (%q)", job, noHolder, holder)
		}
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rec, err := c.store.LoadCurrent(gctx, job)
		cancel()
		if err != nil || rec.Current == nil {
			return false, fmt.Sprintf("job %s: the store's assignment cannot be read (%v)", job, err)
		}
		gen := rec.Current.Generation
		var stored, live []string
		for _, t := range rec.Current.Tasks {
			stored = append(stored, t.Name)
		}
		for _, t := range c.tasks {
			if t.job == job && t.running() {
				live = append(live, t.name)
			}
		}
		slices.Sort(stored)
		slices.Sort(live)
		if !slices.Equal(stored, live) {
			return false, fmt.Sprintf("job %s: generation %d names tasks %v, running are %v", job, gen, stored, live)
		}
		for _, n := range c.nodes {
			if !n.running() {
				continue
			}
			if g := c.nodeViews[job][n.name].Generation(); g != gen {
				return false, fmt.Sprintf("job %s: node %s serves generation %d, the store holds %d", job, n.name, g, gen)
			}
		}
		if g := c.clerks[job].Generation(); g != gen {
			return false, fmt.Sprintf("job %s: the clients' Clerk holds generation %d, the store %d", job, g, gen)
		}
		client := kvcache.NewClient(c.clerks[job], c.hc)
		for k := range probeKeys {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, _, err := client.Get(pctx, "probe-"+strconv.Itoa(k))
			cancel()
			if err != nil {
				return false, fmt.Sprintf("job %s: probe of key probe-%d: %v", job, k, err)
			}
		}
	}
	return true, ""
}

// awaitConvergence polls until the cluster converges or timeout passes,
// and returns how long it took from since, and each condition it waited
// for, with when it was first seen unmet.
func (c *cluster) awaitConvergence(ctx context.Context, since time.Time, timeout time.Duration) (time.Duration, []string, error) {
	deadline := since.Add(timeout)
	var waited []string
	last := ""
	for {
		ok, why := c.converged(ctx)
		if ok {
			return time.Since(since), waited, nil
		}
		if why != last && len(waited) < 20 {
			waited = append(waited, fmt.Sprintf("+%.1fs %s", time.Since(since).Seconds(), why))
		}
		last = why
		if time.Now().After(deadline) {
			return time.Since(since), waited, fmt.Errorf("not converged %v after the heal: %s", timeout, why)
		}
		if err := benchproc.Sleep(ctx, 100*time.Millisecond); err != nil {
			return time.Since(since), waited, err
		}
	}
}
