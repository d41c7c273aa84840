package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/bench/internal/benchproc"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/internal/netbed"
	"github.com/slicerd/slicerd/storage/etcdstore"
)

// The bed's layout: five hosts on one switch. h1, h2 and h3 each run an
// etcd member and a slicerd node (every role, on the shared etcd store);
// h1 to h4 each run one task of the strong job and one of the affinity
// job; h5 is the clients' host: the harness's own Clerks, kvcache clients
// and the strong job's backing store open their sockets there
// (netbed.Host.DialContext, Listen), so a client is cut off exactly when
// h5 is.
const (
	strongJob   = "kv"
	affinityJob = "cache"
	storePrefix = "/partition/"

	etcdClientPort = 2379
	etcdPeerPort   = 2380
	rpcPort        = 7000
	gossipPort     = 7946
	backingPort    = 9000
)

var (
	hostNames   = []string{"h1", "h2", "h3", "h4", "h5"}
	serverHosts = []string{"h1", "h2", "h3"}       // an etcd member and a slicerd node each
	taskHosts   = []string{"h1", "h2", "h3", "h4"} // a task of each job each
	clientHost  = "h5"
)

// proc is a process of the cluster on a host, restartable with the same
// arguments; each start logs to a file of its own.
type proc struct {
	name  string
	job   string // a task's job
	host  *netbed.Host
	bin   string
	args  []string
	env   []string
	ready string // a line that says it serves
	dir   string
	p     *benchproc.Proc
	logs  []string
}

func (p *proc) start() error {
	logf := filepath.Join(p.dir, fmt.Sprintf("%s-%d.log", p.name, len(p.logs)))
	bp, err := benchproc.Start(p.name, logf, p.ready, p.env, "ip", append([]string{"netns", "exec", p.host.NS, p.bin}, p.args...)...)
	if err != nil {
		return err
	}
	p.p, p.logs = bp, append(p.logs, logf)
	if _, err := bp.WaitReady(60 * time.Second); err != nil {
		benchproc.StopAll([]*benchproc.Proc{bp}, 5*time.Second)
		return fmt.Errorf("%w (log: %s)", err, logf)
	}
	return nil
}

// running reports whether the process was started and has not exited.
func (p *proc) running() bool {
	if p.p == nil {
		return false
	}
	select {
	case <-p.p.Exited():
		return false
	default:
		return true
	}
}

// cluster is everything a run starts: the bed, the processes on it, and
// the harness's clients on h5.
type cluster struct {
	o      options
	dir    string
	say    func(string, ...any)
	bed    *netbed.Bed
	client *netbed.Host

	etcd  []*proc // e1..e3 on h1..h3
	nodes []*proc // n1..n3 on h1..h3
	tasks []*proc // s1..s4 (strong) and a1..a4 (affinity) on h1..h4

	backing *kvcache.MemBacking
	db      *http.Server
	dbDone  chan struct{}

	etcdc *clientv3.Client
	store *etcdstore.Store // read-only, through the same network as etcdc
	hc    *http.Client     // kvcache requests from h5

	clerkStop []func()
	clerks    map[string]*clerk.Clerk            // job → the clients' Clerk
	nodeViews map[string]map[string]*clerk.Clerk // job → node → a Clerk of that node only
}

func hostAddr(h *netbed.Host, port int) string { return h.AddrPort(uint16(port)) }

// startCluster builds the bed and starts everything on it, waiting until
// both jobs are assigned over all their tasks. On error, close what it
// returns.
func startCluster(ctx context.Context, o options, dir string, say func(string, ...any)) (*cluster, error) {
	c := &cluster{o: o, dir: dir, say: say, clerks: map[string]*clerk.Clerk{}, nodeViews: map[string]map[string]*clerk.Clerk{}}
	bed, err := netbed.New(ctx, "", hostNames...)
	if err != nil {
		return c, err
	}
	c.bed, c.client = bed, bed.Host(clientHost)
	say("bed of %d hosts in %v (namespaces %s...)", len(bed.Hosts), bed.Prefix(), bed.Hosts[0].NS)

	var cluster []string
	for i, hn := range serverHosts {
		h := bed.Host(hn)
		cluster = append(cluster, fmt.Sprintf("e%d=http://%s", i+1, hostAddr(h, etcdPeerPort)))
	}
	for i, hn := range serverHosts {
		h := bed.Host(hn)
		name := fmt.Sprintf("e%d", i+1)
		c.etcd = append(c.etcd, &proc{name: name, host: h, bin: o.etcdmember, dir: dir, ready: "etcdmember ready",
			args: []string{"-name", name, "-dir", filepath.Join(dir, "data", name), "-client", "http://" + hostAddr(h, etcdClientPort),
				"-peer", "http://" + hostAddr(h, etcdPeerPort), "-cluster", strings.Join(cluster, ",")}})
	}
	// The members wait for each other: start all, then wait.
	for _, e := range c.etcd {
		logf := filepath.Join(dir, e.name+"-0.log")
		bp, err := benchproc.Start(e.name, logf, e.ready, nil, "ip", append([]string{"netns", "exec", e.host.NS, e.bin}, e.args...)...)
		if err != nil {
			return c, err
		}
		e.p, e.logs = bp, []string{logf}
	}
	for _, e := range c.etcd {
		if _, err := e.p.WaitReady(60 * time.Second); err != nil {
			return c, fmt.Errorf("%w (log: %s)", err, e.logs[0])
		}
	}
	if c.etcdc, err = clientv3.New(clientv3.Config{Endpoints: c.etcdEndpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return c.client.DialContext(ctx, "tcp", addr)
		})}}); err != nil {
		return c, fmt.Errorf("etcd client: %w", err)
	}
	if c.store, err = etcdstore.Open(ctx, etcdstore.Options{Endpoints: c.etcdEndpoints(), Prefix: storePrefix, ReadOnly: true,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			return c.client.DialContext(ctx, "tcp", addr)
		}}); err != nil {
		return c, fmt.Errorf("etcd store: %w", err)
	}
	say("etcd: 3 members up")

	store := "etcd://" + strings.Join(c.etcdEndpoints(), ",") + storePrefix
	var joins []string
	for _, hn := range serverHosts {
		joins = append(joins, hostAddr(bed.Host(hn), gossipPort))
	}
	for i, hn := range serverHosts {
		h := bed.Host(hn)
		name := fmt.Sprintf("n%d", i+1)
		n := &proc{name: name, host: h, bin: o.slicerd, dir: dir, ready: `"msg":"slicerd started"`, env: []string{"SLICERD_LOG_FORMAT=json"},
			args: []string{"--node-name", name, "--store", store, "--data-dir", filepath.Join(dir, "data", name),
				"--rpc-addr", hostAddr(h, rpcPort), "--gossip-addr", hostAddr(h, gossipPort), "--gossip-profile", "local",
				"--rebalance-delay", "200ms", "--startup-grace", "500ms",
				// A bed of namespaces on one machine is a network we trust.
				"--insecure"}}
		if i > 0 {
			n.args = append(n.args, "--join", strings.Join(joins[:i], ","))
		}
		if err := n.start(); err != nil {
			return c, err
		}
		if i == 0 {
			// A restarted n1 joins the others.
			n.args = append(n.args, "--join", strings.Join(joins[1:], ","))
		}
		c.nodes = append(c.nodes, n)
	}
	set := c.client.Command(ctx, o.slicerd, "job", "set", "--addr", c.rpcAddrs()[0], "--consistency", "strong", strongJob)
	if out, err := set.CombinedOutput(); err != nil {
		return c, fmt.Errorf("slicerd job set --consistency strong %s: %w: %s", strongJob, err, out)
	}
	say("slicerd: 3 nodes up; job %s set strong", strongJob)

	c.backing = kvcache.NewMemBacking()
	ln, err := c.client.Listen("tcp", hostAddr(c.client, backingPort))
	if err != nil {
		return c, fmt.Errorf("backing store on %s: %w", c.client, err)
	}
	c.db, c.dbDone = &http.Server{Handler: kvcache.BackingHandler(c.backing)}, make(chan struct{})
	go func() { defer close(c.dbDone); c.db.Serve(ln) }()

	for i, hn := range taskHosts {
		h := bed.Host(hn)
		for _, job := range []string{strongJob, affinityJob} {
			name, port := fmt.Sprintf("s%d", i+1), 8001
			if job == affinityJob {
				name, port = fmt.Sprintf("a%d", i+1), 8002
			}
			t := &proc{name: name, job: job, host: h, bin: o.kvserver, dir: dir, ready: "kvserver task=",
				args: []string{"-job", job, "-task", name, "-addr", hostAddr(h, port), "-gossip-addr", hostAddr(h, port-8001+gossipPort+1),
					"-gossip-profile", "local", "-join", strings.Join(joins, ","), "-load-window", "1s", "-log-level", o.taskLogLevel}}
			if job == strongJob {
				t.args = append(t.args, "-consistency", "strong", "-lease-ttl", o.leaseTTL.String(),
					"-backing", "http://"+hostAddr(c.client, backingPort), "-record", filepath.Join(dir, name+".rec"))
			}
			if err := t.start(); err != nil {
				return c, err
			}
			c.tasks = append(c.tasks, t)
		}
	}
	for _, job := range []string{strongJob, affinityJob} {
		ck, err := c.runClerk(ctx, job, c.rpcAddrs(), clerk.DefaultSubsetSize)
		if err != nil {
			return c, err
		}
		c.clerks[job] = ck
		c.nodeViews[job] = map[string]*clerk.Clerk{}
		for _, n := range c.nodes {
			if c.nodeViews[job][n.name], err = c.runClerk(ctx, job, []string{hostAddr(n.host, rpcPort)}, 0); err != nil {
				return c, err
			}
		}
	}
	c.hc = &http.Client{Timeout: o.deadline, Transport: &http.Transport{DialContext: c.client.DialContext, MaxIdleConnsPerHost: 64}}
	return c, nil
}

// runClerk starts a Clerk of job on h5, streaming from addrs.
func (c *cluster) runClerk(ctx context.Context, job string, addrs []string, subset int) (*clerk.Clerk, error) {
	hc := api.NewHTTPClient(nil)
	hc.Transport.(*http.Transport).DialContext = c.client.DialContext
	cfg := clerk.DefaultConfig()
	cfg.Job, cfg.Addrs, cfg.HTTPClient, cfg.SubsetSize = job, addrs, hc, subset
	cfg.MaxBackoff = time.Second // a client of a test bed retries sooner than the default 5 s
	ck, err := clerk.New(cfg)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); ck.Run(cctx) }()
	c.clerkStop = append(c.clerkStop, func() { cancel(); <-done; hc.CloseIdleConnections() })
	return ck, nil
}

func (c *cluster) etcdEndpoints() []string {
	var eps []string
	for _, hn := range serverHosts {
		eps = append(eps, hostAddr(c.bed.Host(hn), etcdClientPort))
	}
	return eps
}

func (c *cluster) rpcAddrs() []string {
	var addrs []string
	for _, hn := range serverHosts {
		addrs = append(addrs, hostAddr(c.bed.Host(hn), rpcPort))
	}
	return addrs
}

func (c *cluster) proc(name string) *proc {
	for _, ps := range [][]*proc{c.etcd, c.nodes, c.tasks} {
		for _, p := range ps {
			if p.name == name {
				return p
			}
		}
	}
	return nil
}

// all returns every process of the cluster.
func (c *cluster) all() []*benchproc.Proc {
	var ps []*benchproc.Proc
	for _, group := range [][]*proc{c.tasks, c.nodes, c.etcd} {
		for _, p := range group {
			if p.p != nil {
				ps = append(ps, p.p)
			}
		}
	}
	return ps
}

// stopProcs stops the processes, tasks first, then nodes, then etcd, each
// group with SIGTERM and then SIGKILL past a grace; stopped processes
// are continued first, or SIGTERM would wait for a SIGCONT.
func (c *cluster) stopProcs() {
	for _, group := range [][]*proc{c.tasks, c.nodes, c.etcd} {
		var ps []*benchproc.Proc
		for _, p := range group {
			if p.running() {
				p.p.Cmd.Process.Signal(contSignal)
				ps = append(ps, p.p)
			}
		}
		benchproc.StopAll(ps, 5*time.Second)
	}
}

// close stops the clients and the processes and removes the bed.
func (c *cluster) close() error {
	for _, stop := range c.clerkStop {
		stop()
	}
	c.clerkStop = nil
	if c.hc != nil {
		c.hc.CloseIdleConnections()
	}
	if c.store != nil {
		c.store.Close()
	}
	if c.etcdc != nil {
		c.etcdc.Close()
	}
	c.stopProcs()
	if c.db != nil {
		c.db.Close()
		<-c.dbDone
	}
	var err error
	if c.bed != nil {
		err = c.bed.Close()
	}
	return err
}

// leaseHolder is the name of the node holding the job's lease, from etcd.
func (c *cluster) leaseHolder(ctx context.Context, job string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.etcdc.Get(ctx, storePrefix+"leases/"+job+"/job")
	if err != nil {
		return "", fmt.Errorf("read %s's job lease: %w", job, err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// errSkip marks a fault that could not be injected because the cluster
// lacks its target; the nemesis goes on with the next.
var errSkip = errors.New("skipped")

// waitLeaseHolder waits until a running node holds the job's lease; past
// timeout the fault that needs it is skipped.
func (c *cluster) waitLeaseHolder(ctx context.Context, job string, timeout time.Duration) (*proc, error) {
	deadline := time.Now().Add(timeout)
	for {
		name, err := c.leaseHolder(ctx, job)
		if p := c.proc(name); err == nil && p != nil && p.running() {
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: job %s: %s %v after the last convergence (last holder: %q, %v)", errSkip, job, noHolder, timeout, name, err)
		}
		if err := benchproc.Sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// etcdLeader returns the etcd member that leads, asking each member in
// turn.
func (c *cluster) etcdLeader(ctx context.Context) (*proc, error) {
	var errs []error
	for i, ep := range c.etcdEndpoints() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.etcdc.Status(sctx, ep)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Leader != 0 && st.Leader == st.Header.MemberId {
			return c.etcd[i], nil
		}
	}
	return nil, fmt.Errorf("no etcd member says it leads: %w", errors.Join(errs...))
}
