package roles

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"golang.org/x/net/http2"
	"golang.org/x/sync/errgroup"

	"github.com/slicerd/slicerd/api/gen/slicer/v1/slicerv1connect"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/internal/batchconn"
	"github.com/slicerd/slicerd/internal/connlimit"
	"github.com/slicerd/slicerd/internal/fanout"
	"github.com/slicerd/slicerd/internal/hostcheck"
	"github.com/slicerd/slicerd/internal/startgate"
	"github.com/slicerd/slicerd/internal/webui"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/roles/assigner"
	"github.com/slicerd/slicerd/roles/auth"
	"github.com/slicerd/slicerd/roles/distributor"
	"github.com/slicerd/slicerd/roles/rpc"
	"github.com/slicerd/slicerd/roles/watch"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/tlsconfig"
)

// refusalLogInterval is the least time between two log lines about
// connections refused over MaxConnections or MaxConnectionsPerIP, and
// between two about requests refused by the Host check.
const refusalLogInterval = 10 * time.Second

// Agent is one slicerd process: any of an Assigner, a Distributor and a
// Backup (each nil when its role is off), one gossip member, one store and
// one RPC server. New builds it without starting anything; Run runs it.
type Agent struct {
	cfg         Config
	log         *slog.Logger
	store       storage.Store
	leases      lease.Manager // the assigner role's; nil without it
	listener    net.Listener
	conns       *connlimit.Listener // under listener: the connection caps
	server      *http.Server
	gate        *startgate.Gate // bounds the RPCs starting at once (--max-starting-rpcs)
	hosts       *hostcheck.Checker
	streams     *watch.Limiter
	health      *grpchealth.StaticChecker
	assigner    *assigner.Assigner
	distributor *distributor.Distributor
	backup      *distributor.Backup
	services    []string
	// The web UI: its handler (nil without an Assigner) and, with
	// Config.UIAddr, its own listener and server (nil otherwise).
	ui         http.Handler
	uiListener net.Listener
	uiServer   *http.Server

	stopping chan struct{}
	// accepting closes when the RPC server first waits for a connection,
	// ready once Run serves (see Ready), and shuttingDown when Run's
	// graceful shutdown begins.
	accepting    chan struct{}
	ready        chan struct{}
	shuttingDown chan struct{}
	// stopCtx is the base of every request's context, cancelled right
	// after stopping closes: a stream waits on its own context only, not
	// on one channel shared by every stream.
	stopCtx    context.Context
	stopCancel context.CancelFunc
	sendWatch  *watch.SendWatch // bounds stream sends by --stream-write-timeout

	mu      sync.Mutex
	node    *gossip.Node
	changes fanout.Signal // Changes subscriptions
	verify  *verifier     // nil without TLS
	// verified counts the verifier's changes to what Peers lists (task
	// registrations, agent verdicts); see Version.
	verified atomic.Uint64
	// refusals counts and logs refused TLS handshakes and refused calls;
	// nil without TLS, where nobody is refused.
	refusals *auth.Refusals
}

// New validates cfg, opens the store and binds the RPC port, so that every
// configuration or environment problem surfaces before Run. ctx bounds the
// store's opening (an etcd dial); it is not kept.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: cfg.Logger, stopping: make(chan struct{}),
		accepting: make(chan struct{}), ready: make(chan struct{}), shuttingDown: make(chan struct{})}
	a.stopCtx, a.stopCancel = context.WithCancel(context.Background())
	a.sendWatch = watch.NewSendWatch(cfg.StreamWriteTimeout)
	// At most maxStartingHandlers RPCs run their start at once, until
	// they answer or wait for an event; the others
	// wait at the gate in arrival order. When 100,000 watch streams open
	// at once (subscribers reconnecting after a restart), the scheduler's
	// run queue stays near that number instead of holding every stream's
	// goroutine, and gossip's probes and new connections' prefaces are
	// answered in time (docs/benchmarks.md).
	a.gate = startgate.New(maxStartingHandlers(cfg.MaxStartingRPCs), 0)

	if cfg.has(gossip.RoleAssigner) || cfg.has(gossip.RoleBackup) {
		// A backup-only agent opens the store read-only.
		store, err := openStore(ctx, cfg, !cfg.has(gossip.RoleAssigner))
		if err != nil {
			return nil, err
		}
		a.store = store
	}
	if cfg.has(gossip.RoleAssigner) {
		leases, err := openLeases(ctx, cfg, a.store)
		if err != nil {
			a.closeStore()
			return nil, err
		}
		a.leases = leases
	}
	ln, err := net.Listen("tcp", cfg.RPCAddr)
	if err != nil {
		a.closeStore()
		return nil, fmt.Errorf("%w: listen on rpc address %s: %w; is another slicerd running? choose another --rpc-addr", ErrConfig, cfg.RPCAddr, err)
	}
	// Writes to RPC connections are coalesced (internal/batchconn): a
	// generation fanned out to the watch streams of one connection leaves
	// in a few system calls instead of one per stream. It buffers at most
	// batchconn.DefaultMaxPending (32 KiB) per connection.
	// With TLS, connections that have not proven a certificate of the
	// cluster's CA share a quarter of --max-connections, the oldest of
	// them closed to admit a new one (connlimit): a flood of plain TCP
	// connects cannot refuse the tasks, peers and clients that prove
	// themselves (proveConns).
	unproven := 0
	if cfg.TLS != nil {
		unproven = max(1, cfg.MaxConnections/4)
	}
	a.conns = connlimit.Wrap(ln, connlimit.Limits{
		Max: cfg.MaxConnections, MaxPerIP: cfg.MaxConnectionsPerIP, MaxUnproven: unproven,
		LogInterval: refusalLogInterval, Logger: cfg.Logger.With("component", "rpc"),
	})
	a.listener = &batchconn.Listener{Listener: a.conns}
	if cfg.UIAddr != "" {
		uiLn, err := net.Listen("tcp", cfg.UIAddr)
		if err != nil {
			a.listener.Close()
			a.closeStore()
			return nil, fmt.Errorf("%w: listen on web UI address %s: %w; choose another --ui-addr", ErrConfig, cfg.UIAddr, err)
		}
		a.uiListener = connlimit.Wrap(uiLn, connlimit.Limits{
			Max: uiMaxConnections, MaxPerIP: uiMaxConnectionsPerIP,
			LogInterval: refusalLogInterval, Logger: cfg.Logger.With("component", "webui"),
		})
	}

	if cfg.TLS != nil {
		a.verify = newVerifier(cfg.TLS, cfg.NodeName, cfg.Logger, func() {
			a.verified.Add(1) // after the change, as gossip.Node.Version
			a.changes.Notify()
		})
		a.refusals = auth.NewRefusals(cfg.Logger)
	}
	mux := http.NewServeMux()
	a.streams = watch.NewLimiter(cfg.MaxStreams, refusalLogInterval, cfg.Logger.With("component", "rpc"))
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(cfg.MaxRequestBytes), connect.WithCodec(watch.Codec{}), connect.WithInterceptors(a.streams, auth.Messages{Refusals: a.refusals})}
	if cfg.has(gossip.RoleAssigner) {
		acfg := assigner.Config{
			Logger: cfg.Logger, NodeName: cfg.NodeName, Preference: cfg.Preference, TLS: cfg.TLS,
			StandbyPollInterval: cfg.StandbyPollInterval, RebalanceDelay: cfg.RebalanceDelay,
			StartupGrace: cfg.StartupGrace, RebalanceInterval: cfg.RebalanceInterval,
			LoadHalfLife: cfg.LoadHalfLife, LoadHistoryInterval: cfg.LoadHistoryInterval, JobLeaseTTL: cfg.JobLeaseTTL,
			MaxJobs: cfg.MaxJobs, MaxSlicesPerJob: cfg.MaxSlicesPerJob,
			MaxLoadReportsPerSecond: cfg.MaxLoadReportsPerSecond, LoadReportBurst: cfg.LoadReportBurst,
			DisableBridge: cfg.DisableBridge, BridgeWait: cfg.BridgeWait,
			RawPeers: a.rawPeers, RefusalLogInterval: refusalLogInterval,
			GossipKeys: func() [][]byte {
				if n := a.gossipNode(); n != nil {
					return n.LocalKeys()
				}
				return nil
			},
		}
		if a.verify != nil {
			acfg.Register = a.verify.register
		}
		a.assigner = assigner.New(acfg, a.store, a.leases, a, a.stopping)
		a.handle(mux, slicerv1connect.AssignerServiceName)(slicerv1connect.NewAssignerServiceHandler(a.assigner, opts...))
		a.handle(mux, slicerv1connect.JobServiceName)(slicerv1connect.NewJobServiceHandler(a.assigner, opts...))
		a.handle(mux, slicerv1connect.LoadServiceName)(slicerv1connect.NewLoadServiceHandler(a.assigner, opts...))
		a.handle(mux, slicerv1connect.LeaseServiceName)(slicerv1connect.NewLeaseServiceHandler(a.assigner, opts...))
	}
	if cfg.has(gossip.RoleDistributor) {
		a.distributor = distributor.New(distributor.Config{
			Logger: cfg.Logger, Preference: cfg.Preference, TLS: cfg.TLS,
			PullMinBackoff: cfg.PullMinBackoff, PullMaxBackoff: cfg.PullMaxBackoff,
			Upstreams: cfg.DistributorUpstreams,
			// Jobs beyond --max-jobs exist (the Assigners serve every
			// stored job); twice it leaves them room, and bounds the
			// names no Assigner knows that wait here while none answers.
			MaxJobs: 2 * cfg.MaxJobs,
		}, a, a.stopping)
		a.handle(mux, slicerv1connect.DistributorServiceName)(slicerv1connect.NewDistributorServiceHandler(a.distributor, opts...))
	}
	if cfg.has(gossip.RoleBackup) {
		a.backup = distributor.NewBackup(cfg.Logger, a.store, cfg.BackupPollInterval, a.stopping)
		a.handle(mux, slicerv1connect.BackupServiceName)(slicerv1connect.NewBackupServiceHandler(a.backup, opts...))
	}
	if err := a.registerMetrics(cfg.Registerer); err != nil {
		a.closeListeners()
		return nil, err
	}
	a.handle(mux, slicerv1connect.KeyringServiceName)(slicerv1connect.NewKeyringServiceHandler(newKeyringService(a), opts...))
	a.health = grpchealth.NewStaticChecker(a.services...)
	mux.Handle(grpchealth.NewHandler(a.health))
	reflector := grpcreflect.NewStaticReflector(append([]string{grpchealth.HealthV1ServiceName}, a.services...)...)
	// Reflection is a stream a client may hold open: it counts too.
	mux.Handle(grpcreflect.NewHandlerV1(reflector, connect.WithInterceptors(a.streams)))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, connect.WithInterceptors(a.streams)))

	a.hosts = hostcheck.New(hostcheck.Options{
		Allowed: append(ownHosts(cfg), cfg.AllowedHosts...), Flag: "--allowed-hosts",
		LogInterval: refusalLogInterval, Logger: cfg.Logger.With("component", "rpc"),
	})

	if a.assigner != nil {
		a.ui = a.newUIHandler()
	}
	if a.uiListener != nil {
		handler := a.ui
		if cfg.UIMetrics != nil {
			mux := http.NewServeMux()
			// Behind the Host check as the UI is: a page that rebinds its
			// name to this address must not read the scrape either.
			mux.Handle("GET /metrics", a.hosts.Wrap(cfg.UIMetrics))
			mux.Handle("/", a.ui)
			handler = mux
		}
		a.uiServer = &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: cfg.ReadHeaderTimeout,
			// A request is at most 64 KiB: a slow sender gets 10 s, and a
			// response the handler's own deadline plus a margin.
			ReadTimeout:    10 * time.Second,
			WriteTimeout:   webui.CallTimeout + 5*time.Second,
			IdleTimeout:    cfg.IdleTimeout,
			MaxHeaderBytes: 64 << 10,
			ErrorLog:       slog.NewLogLogger(cfg.Logger.With("component", "webui").Handler(), slog.LevelDebug),
			BaseContext:    func(net.Listener) context.Context { return a.stopCtx },
		}
	}

	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	var tlsConf *tls.Config
	if cfg.TLS != nil {
		protocols.SetHTTP2(true)
		tlsConf = proveConns(cfg.TLS.ServerConfig())
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	authn := auth.New(cfg.TLS != nil, cfg.AdminTokens, a.refusals)
	debugLog := slog.NewLogLogger(cfg.Logger.With("component", "http").Handler(), slog.LevelDebug)
	httpLog := debugLog
	if a.refusals != nil {
		// Failed TLS handshakes reach the server's error log only: count
		// and log them as refusals.
		httpLog = log.New(auth.HandshakeErrors{Refusals: a.refusals, Next: func(line string) { debugLog.Print(line) }}, "", 0)
	}
	a.server = &http.Server{
		Handler:           bodyTimeout(a.gate.Wrap(a.hosts.Wrap(authn.Wrap(watch.WithLimits(mux, a.sendWatch, cfg.StreamSendBudget)))), cfg.ReadHeaderTimeout),
		TLSConfig:         tlsConf,
		Protocols:         protocols,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout:      cfg.PingInterval,
			PingTimeout:          cfg.PingTimeout,
			MaxConcurrentStreams: cfg.MaxStreamsPerConnection,
		},
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       httpLog,
		BaseContext:    func(net.Listener) context.Context { return a.stopCtx },
	}
	// HTTP/2 from golang.org/x/net/http2 rather than net/http's bundled
	// copy, for its choice of write scheduler: the bundled one walks
	// every open stream of a connection to find one with data on each
	// frame it writes, so one generation fanned out to the n watch
	// streams of a connection costs n² steps (a sixth of slicerd's CPU
	// at 10,000 streams, most of it at 100,000). The random scheduler
	// holds only the streams with data waiting. The settings above
	// (HTTP2, IdleTimeout, TLS) apply to it as to the bundled server,
	// and Shutdown drains it.
	if err := http2.ConfigureServer(a.server, &http2.Server{NewWriteScheduler: func() http2.WriteScheduler { return http2.NewRandomWriteScheduler() }}); err != nil {
		a.closeListeners()
		return nil, fmt.Errorf("roles: configure HTTP/2: %w", err)
	}
	return a, nil
}

// closeListeners releases what New opened when it fails after opening
// the listeners: the RPC and web UI listeners and the store.
func (a *Agent) closeListeners() {
	a.listener.Close()
	if a.uiListener != nil {
		a.uiListener.Close()
	}
	a.closeStore()
}

// ownHosts are the host names of the node's RPC addresses, which the Host
// check allows besides IP addresses and localhost: clients that dial a
// node by the name it was given send that name.
func ownHosts(cfg Config) []string {
	var names []string
	for _, addr := range []string{cfg.RPCAddr, cfg.AdvertiseRPCAddr, cfg.UIAddr} {
		if host, _, err := net.SplitHostPort(addr); err == nil && host != "" && hostcheck.ValidateAllowed(host) == nil {
			names = append(names, host)
		}
	}
	return names
}

func (a *Agent) handle(mux *http.ServeMux, service string) func(string, http.Handler) {
	a.services = append(a.services, service)
	return mux.Handle
}

// RPCAddr is the address the RPC server listens on.
func (a *Agent) RPCAddr() string { return a.listener.Addr().String() }

// Ready is closed once Run serves clients: gossip has started, the RPC
// server accepts connections, every role runs and an Assigner has loaded
// the stored jobs. It stays open when Run fails or stops first.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// ShuttingDown is closed when Run begins its graceful shutdown, before
// the health service reports NOT_SERVING and the node leaves gossip.
func (a *Agent) ShuttingDown() <-chan struct{} { return a.shuttingDown }

// Check reports whether the agent is alive and serving, for a liveness
// watchdog: Run is ready and not shutting down, and gossip runs and holds
// this node alive. It reads gossip's member table, so a wedged gossip
// layer blocks it rather than being reported alive.
func (a *Agent) Check() error {
	select {
	case <-a.shuttingDown:
		return fmt.Errorf("%w: shutting down", rpc.ErrNotServing)
	default:
	}
	select {
	case <-a.ready:
	default:
		return fmt.Errorf("%w: starting", rpc.ErrNotServing)
	}
	node := a.gossipNode()
	select {
	case <-node.Done():
		return fmt.Errorf("%w: gossip has stopped", rpc.ErrNotServing)
	default:
	}
	if self := node.Self(); self.Status != gossip.StatusAlive {
		return fmt.Errorf("%w: gossip holds this node %s", rpc.ErrNotServing, self.Status)
	}
	return nil
}

// acceptSignal closes accepting when the RPC server first calls Accept:
// from then on a connection is served, not only queued by the kernel.
type acceptSignal struct {
	net.Listener
	once      sync.Once
	accepting chan struct{}
}

func (l *acceptSignal) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.accepting) })
	return l.Listener.Accept()
}

// GossipAddr is the bound gossip address, or "" before Run starts gossip.
func (a *Agent) GossipAddr() string {
	if n := a.gossipNode(); n != nil {
		return n.GossipAddr()
	}
	return ""
}

func (a *Agent) gossipNode() *gossip.Node {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.node
}

// Peers implements membership for the roles.
// With TLS, it lists only the members whose claims certificates back
// (see verifier).
func (a *Agent) Peers() []gossip.Peer {
	peers := a.rawPeers()
	if a.verify != nil {
		return a.verify.filter(peers)
	}
	return peers
}

// rawPeers is the gossip view as the members advertise themselves.
func (a *Agent) rawPeers() []gossip.Peer {
	if n := a.gossipNode(); n != nil {
		return n.Peers()
	}
	return nil
}

// RTT implements proximity for the roles: the gossip node's estimate of
// the round trip between two members.
func (a *Agent) RTT(x, y string) (time.Duration, bool) {
	if n := a.gossipNode(); n != nil {
		return n.RTT(x, y)
	}
	return 0, false
}

var _ assigner.MembersVersion = (*Agent)(nil)

// Version implements membership versions for the roles: it moves after
// anything that changes what Peers lists, a gossip member event (see
// gossip.Node.Version) or, with TLS, a task's registration or an agent's
// verification; while it stays, Peers lists what it listed, but for a
// gossip change whose event is on its way.
func (a *Agent) Version() uint64 {
	var v uint64
	if n := a.gossipNode(); n != nil {
		// 1 more than without a node: Peers listed nothing before gossip
		// started, and a node that has handled no event yet lists itself.
		v = n.Version() + 1
	}
	return v + a.verified.Load()
}

// Changes implements membership for the roles: see gossip.Node.Changes.
// It may be called before Run; the channel then receives a signal once
// gossip has started, and every change after.
func (a *Agent) Changes() (<-chan struct{}, func()) { return a.changes.Subscribe() }

// storeAttrs describe the store this agent uses, for its start line: none
// for a Distributor alone, and a data dir only for the bbolt file.
func (a *Agent) storeAttrs() []any {
	spec, _ := ParseStore(a.cfg.Store) // valid: New checked it
	switch {
	case a.store == nil:
		return []any{"store", "none"}
	case a.cfg.OpenStore != nil:
		return []any{"store", "custom"}
	case spec.Etcd:
		return []any{"store", a.cfg.Store}
	}
	return []any{"store", "bolt", "data_dir", a.cfg.DataDir}
}

// RejoinFileName is the file in the data directory where a node that keeps
// its store there records a few live gossip members, and from which it
// rejoins them when it starts (gossip.Config.RejoinFile).
const RejoinFileName = "gossip-members"

// usesDataDir reports whether this agent keeps its store in the data
// directory (the embedded bbolt store).
func (a *Agent) usesDataDir() bool {
	spec, _ := ParseStore(a.cfg.Store) // valid: New checked it
	return a.store != nil && a.cfg.OpenStore == nil && !spec.Etcd && a.cfg.DataDir != ""
}

// Run joins gossip, serves RPCs and runs the roles until ctx ends, then
// leaves gossip gracefully, drains RPC streams and closes the store. It
// returns the first error that stopped it.
func (a *Agent) Run(ctx context.Context) error {
	defer a.closeStore()
	advertise := a.cfg.AdvertiseRPCAddr
	if advertise == "" {
		advertise = a.RPCAddr()
	}
	gcfg := a.cfg.Gossip
	gcfg.NodeName = a.cfg.NodeName
	gcfg.Self = gossip.Peer{Name: a.cfg.NodeName, Roles: a.cfg.Roles, RPCAddr: advertise}
	gcfg.Logger = a.log
	if a.usesDataDir() && gcfg.RejoinFile == "" {
		gcfg.RejoinFile = filepath.Join(a.cfg.DataDir, RejoinFileName)
	}
	node, err := gossip.Start(gcfg)
	if err != nil {
		a.listener.Close()
		if a.uiListener != nil {
			a.uiListener.Close()
		}
		return err
	}
	changes, unsubscribe := node.Changes()
	defer unsubscribe()
	a.mu.Lock()
	a.node = node
	a.mu.Unlock()
	defer node.Shutdown()
	started := []any{"node", a.cfg.NodeName, "roles", a.cfg.Roles, "rpc_addr", a.RPCAddr(), "gossip_addr", node.GossipAddr()}
	if a.uiServer != nil {
		started = append(started, "ui_addr", a.UIAddr())
	}
	a.log.Info("slicerd started", append(started, a.storeAttrs()...)...)

	g, gctx := errgroup.WithContext(ctx)
	if a.cfg.TLS != nil {
		g.Go(func() error {
			warnCertExpiry(gctx, a.cfg.TLS)
			return nil
		})
	}
	g.Go(func() error {
		a.changes.Notify() // gossip has started: subscriptions made before Run see it
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-changes:
				a.changes.Notify()
			}
		}
	})
	if len(gcfg.Join) > 0 {
		g.Go(func() error {
			if err := node.RetryJoin(gctx, gcfg.Join, a.cfg.JoinRetryInterval); err != nil {
				if gctx.Err() == nil {
					a.log.Error("gave up joining gossip", "join", gcfg.Join, "err", err)
				}
				return nil
			}
			a.log.Info("joined gossip", "join", gcfg.Join)
			return node.KeepJoined(gctx, gcfg.Join, a.cfg.JoinRetryInterval, func(peers []gossip.Peer) bool {
				return gossip.HasLiveServer(a.cfg.NodeName, peers)
			})
		})
	}
	g.Go(func() error {
		serve := a.server.Serve
		if a.cfg.TLS != nil {
			serve = func(ln net.Listener) error { return a.server.ServeTLS(ln, "", "") }
		}
		if err := serve(&acceptSignal{Listener: a.listener, accepting: a.accepting}); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("rpc server: %w", err)
		}
		return nil
	})
	if a.uiServer != nil {
		g.Go(func() error {
			if err := a.uiServer.Serve(a.uiListener); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("web UI server: %w", err)
			}
			return nil
		})
	}
	if a.verify != nil {
		g.Go(func() error {
			a.verify.run(gctx, a.rawPeers)
			return nil
		})
	}
	g.Go(func() error {
		a.sendWatch.Run(gctx)
		return nil
	})
	if a.assigner != nil {
		// The Assigner runs until the node has left gossip (shutdown
		// closes stopping once it has), so that it gives its job leases
		// back only when the other Assigners see it gone and want its
		// jobs. Given back at the signal, a job would have no holder
		// until they noticed the leave, which serf tells them only once
		// it is complete.
		actx, stopAssigner := context.WithCancel(context.WithoutCancel(gctx))
		g.Go(func() error {
			defer stopAssigner()
			return a.assigner.Run(actx)
		})
		g.Go(func() error {
			<-a.stopping
			stopAssigner()
			return nil
		})
	}
	if a.distributor != nil {
		g.Go(func() error { return a.distributor.Run(gctx) })
	}
	if a.backup != nil {
		g.Go(func() error {
			a.backup.LogJobs(gctx)
			return nil
		})
	}
	g.Go(func() error {
		select {
		case <-gctx.Done():
			return nil
		case <-a.accepting:
		}
		if a.assigner != nil {
			select {
			case <-gctx.Done():
				return nil
			case <-a.assigner.Loaded():
			}
		}
		a.log.Info("slicerd ready", "node", a.cfg.NodeName, "roles", a.cfg.Roles, "rpc_addr", a.RPCAddr())
		close(a.ready)
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		a.shutdown(node)
		return nil
	})
	err = g.Wait()
	a.log.Info("slicerd stopped", "node", a.cfg.NodeName)
	return err
}

// shutdown leaves gossip first, so tasks and other nodes see a drain rather
// than a failure, then ends streams and closes the RPC server.
func (a *Agent) shutdown(node *gossip.Node) {
	close(a.shuttingDown)
	a.health.SetStatus("", grpchealth.StatusNotServing)
	for _, s := range a.services {
		a.health.SetStatus(s, grpchealth.StatusNotServing)
	}
	leaveCtx, cancel := context.WithTimeout(context.Background(), a.cfg.LeaveTimeout)
	if err := node.Leave(leaveCtx); err != nil {
		a.log.Warn("graceful gossip leave did not complete", "err", err)
	} else {
		a.log.Info("left gossip")
	}
	cancel()
	close(a.stopping)
	a.stopCancel()
	drainCtx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	if a.uiServer != nil {
		// Its requests are short reads: no drain worth waiting for.
		a.uiServer.Close()
	}
	if err := a.server.Shutdown(drainCtx); err != nil {
		a.log.Warn("rpc connections did not drain in time; closing them", "err", err)
		a.server.Close()
	}
	a.hosts.Close()
	if a.backup != nil {
		a.backup.Wait()
	}
}

func (a *Agent) closeStore() {
	if a.leases != nil {
		if err := a.leases.Close(); err != nil {
			a.log.Error("closing the lease manager", "err", err)
		}
	}
	if a.store == nil {
		return
	}
	if err := a.store.Close(); err != nil {
		a.log.Error("closing store", "err", err)
	}
}

// Certificates are checked for expiry at start and every certCheckEvery;
// one that expires within certWarnBefore is warned about each time.
const (
	certWarnBefore = 14 * 24 * time.Hour
	certCheckEvery = time.Hour
)

// warnCertExpiry warns about the node's certificate and CA ahead of their
// expiry (tlsconfig.Source.WarnExpiry) until ctx ends.
func warnCertExpiry(ctx context.Context, src *tlsconfig.Source) {
	t := time.NewTicker(certCheckEvery)
	defer t.Stop()
	for {
		src.WarnExpiry(certWarnBefore)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// proveConns has every connection whose TLS handshake verified a client
// certificate (the cluster's CA signed it) marked proven to the connection
// caps (connlimit.Prove), so that it keeps its place however many
// unproven connections arrive.
func proveConns(c *tls.Config) *tls.Config {
	get := c.GetConfigForClient
	c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		conf, err := get(hello)
		if err != nil || conf == nil {
			return conf, err
		}
		conn := hello.Conn
		conf.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 { // verified by now: VerifyClientCertIfGiven
				connlimit.Prove(conn)
			}
			return nil
		}
		return conf, nil
	}
	return c
}
