package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/testwait"
	"github.com/slicerd/slicerd/lease/leasecheck"
	"github.com/slicerd/slicerd/storage/etcdstore/etcdtest"
)

// leaseHolder names which of the Assigners last took the job over.
func leaseHolder(t *testing.T, nodes ...*slicerdNode) *slicerdNode {
	t.Helper()
	var holder *slicerdNode
	var latest time.Time
	for _, n := range nodes {
		for _, line := range strings.Split(n.output(), "\n") {
			if !strings.Contains(line, `"msg":"took over job as its preferred assigner"`) || !strings.Contains(line, `"job":"kv"`) {
				continue
			}
			var rec struct {
				Time time.Time `json:"time"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Time.After(latest) {
				holder, latest = n, rec.Time
			}
		}
	}
	if holder == nil {
		t.Fatal("no assigner took the job over")
	}
	return holder
}

// A strongly consistent job of four real kvserver tasks on two Assigners
// sharing etcd, with clients writing and reading through a backing store
// that refuses stale fencing tokens, through faults: a task stopped for
// longer than its lease and continued, a task killed, the lease-holding
// Assigner killed, and etcd restarted. The tasks' recorded histories show
// no instant at which two tasks owned a key and no token going back; the
// backing store refused no write for a stale token that a task had
// confirmed.
func TestStrongConsistencyUnderFaults(t *testing.T) {
	etcd, a1, a2 := startStrongCluster(t, "strong-e2e")

	backing := kvcache.NewMemBacking()
	db := httptest.NewServer(kvcache.BackingHandler(backing))
	defer db.Close()
	recDir := t.TempDir()
	tasks := map[string]*kvTask{}
	for i := range 4 {
		name := fmt.Sprintf("kv-%d", i)
		tasks[name] = startKV(t, name, a1.gossipAddr, "-consistency", "strong", "-lease-ttl", "2s",
			"-backing", db.URL, "-record", filepath.Join(recDir, name+".rec"))
	}

	cl := runClerk(t, clerk.Config{Job: "kv", Addrs: []string{a1.rpcAddr, a2.rpcAddr}})
	client := kvcache.NewClient(cl, &http.Client{Timeout: 5 * time.Second})
	load := startStrongLoad(t, client)
	defer load.stop()
	runStrongFaults(t, load, tasks["kv-1"].signal, tasks["kv-2"].kill, []*slicerdNode{a1, a2}, etcd, "a task")

	load.stop()
	for _, task := range tasks {
		task.signal(syscall.SIGTERM)
	}
	for _, task := range tasks {
		task.wait(30 * time.Second)
	}
	attempts, satisfied := client.Attempts()
	ops, err := leasecheck.ReadRecords(filepath.Join(recDir, "*.rec"))
	if err != nil {
		t.Fatal(err)
	}
	r := leasecheck.Check(ops)
	t.Logf("%v; client requests: %d succeeded, %d failed; %d of %d attempts satisfied; backing store refused %d stale writes",
		r, load.ok.Load(), load.failed.Load(), satisfied, attempts, backing.Refused())
	if !r.OK() {
		for _, v := range r.Examples {
			t.Error(v)
		}
	}
	if r.Ops == 0 {
		t.Fatal("the tasks recorded no satisfied request")
	}
}

// strongLoad is 8 clients writing and reading 300 keys through a kvcache
// client, 2 ms apart each, until stop.
type strongLoad struct {
	ok, failed atomic.Uint64
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

func startStrongLoad(t *testing.T, client *kvcache.Client) *strongLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &strongLoad{cancel: cancel}
	for c := range 8 {
		l.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for ctx.Err() == nil {
				key := "key-" + strconv.Itoa(rng.IntN(300))
				var err error
				if rng.IntN(2) == 0 {
					err = client.Put(ctx, key, []byte(strconv.Itoa(c)))
				} else {
					_, _, err = client.Get(ctx, key)
				}
				if err == nil {
					l.ok.Add(1)
				} else if ctx.Err() == nil {
					l.failed.Add(1)
				}
				time.Sleep(2 * time.Millisecond) // a request rate, not a wait
			}
		})
	}
	return l
}

// progress waits for 200 more requests to succeed.
func (l *strongLoad) progress(t *testing.T, what string) {
	t.Helper()
	from := l.ok.Load()
	testwait.For(t, "requests to succeed "+what, func() bool { return l.ok.Load() >= from+200 })
}

// stop ends the clients and waits for them; it may be called again.
func (l *strongLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// runStrongFaults injects the strong tests' faults in turn, waiting after
// each for requests to succeed again: a task stopped (signal SIGSTOP) for
// twice its 2 s lease TTL and continued, which must not serve with the
// lease it held before the pause; another task killed; the lease-holding
// Assigner killed; etcd stopped for a second and restarted. what names the
// kind of task, for the messages.
func runStrongFaults(t *testing.T, load *strongLoad, signal func(syscall.Signal), kill func(), assigners []*slicerdNode, etcd *etcdtest.Server, what string) {
	t.Helper()
	load.progress(t, "before the faults")
	signal(syscall.SIGSTOP)
	time.Sleep(4 * time.Second) // the fault itself: twice the lease TTL
	signal(syscall.SIGCONT)
	load.progress(t, "after "+what+" was stopped past its lease")
	kill()
	load.progress(t, "after "+what+" was killed")
	leaseHolder(t, assigners...).kill()
	load.progress(t, "after the lease-holding assigner was killed")
	etcd.Stop()
	time.Sleep(time.Second) // the fault itself: etcd down
	etcd.Restart()
	load.progress(t, "after etcd restarted")
}

// startStrongCluster starts two Assigners sharing an etcd server, under
// prefix, and configures job kv strong.
func startStrongCluster(t *testing.T, prefix string) (*etcdtest.Server, *slicerdNode, *slicerdNode) {
	t.Helper()
	etcd := etcdtest.Start(t)
	store := "etcd://" + etcd.Endpoint() + "/" + prefix + "/"
	a1 := startSlicerd(t, "assigner-1", "--store", store, "--data-dir", t.TempDir())
	a2 := startSlicerd(t, "assigner-2", "--store", store, "--data-dir", t.TempDir(), "--join", a1.gossipAddr)
	if code, out := runSlicerd(t, "job", "set", "--addr", a1.rpcAddr, "--consistency", "strong", "kv"); code != 0 || !strings.Contains(out, "consistency     strong") {
		t.Fatalf("job set --consistency strong: exit %d: %s", code, out)
	}
	return etcd, a1, a2
}
