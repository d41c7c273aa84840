// Command kvserver is one task of the kvcache example: an in-memory cache
// that serves the keys slicerd assigns to it. See ../../README.md.
//
//	kvserver -job kv -task kv-0 -addr 127.0.0.1:0 -join 127.0.0.1:7946 [-cache-file kv-0.cache]
//
// On start it prints one line to stdout,
//
//	kvserver task=<task> addr=<http-addr> gossip=<gossip-addr>
//
// and logs to stderr. SIGINT or SIGTERM first drains the task: it tells
// slicerd it is draining and keeps serving while slicerd moves its keys to
// other tasks, for at most -drain-timeout; then it leaves gossip and stops
// serving. A second signal stops it at once.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/slicelet"
	"github.com/slicerd/slicerd/tlsconfig"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal stops the process at once
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run serves until ctx ends and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	job := fs.String("job", "kv", "job the task belongs to")
	task := fs.String("task", "kv-0", "this task's name, unique within the job")
	addr := fs.String("addr", "127.0.0.1:0", "host:port the cache serves HTTP on (port 0 picks one)")
	join := fs.String("join", "127.0.0.1:7946", "gossip address of a slicerd node, comma-separated for several")
	gossipAddr := fs.String("gossip-addr", "127.0.0.1:0", "host:port this task's gossip member binds to")
	profile := fs.String("gossip-profile", "lan", "gossip timers: lan or local (loopback and tests)")
	gossipKey := fs.String("gossip-key", os.Getenv("SLICERD_GOSSIP_KEY"), "base64 gossip encryption key of the slicerd cluster, if it encrypts gossip (default $SLICERD_GOSSIP_KEY)")
	keyringFile := fs.String("gossip-keyring-file", os.Getenv("SLICERD_GOSSIP_KEYRING_FILE"), "file keeping this task's gossip keys across restarts, so a restart after a key rotation still joins; created from -gossip-key (default $SLICERD_GOSSIP_KEYRING_FILE)")
	logLevel := fs.String("log-level", "info", "log verbosity: debug, info, warn or error")
	cacheFile := fs.String("cache-file", "", "file to keep the job's assignment in, so a restart owns its cached keys at once even while slicerd is down (empty: no cache)")
	capacity := fs.Float64("capacity", 0, "this task's relative capacity: a task of capacity 2 is given about twice the load of one of capacity 1 (0 means 1; 0.001 to 1000)")
	handoff := fs.Bool("handoff", true, "move entries with their keys: a task that gains keys fetches their entries from the task that held them (every task of the job must agree)")
	drainTimeout := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM or SIGINT, how long to keep serving while slicerd moves this task's keys away before stopping (0: stop at once)")
	memoryLimit := fs.Int64("memory-limit", 0, "most bytes of entries (keys and values) this task may hold: slicerd places no slice here past it and moves slices away when the entries outgrow it (0: no limit)")
	loadWindow := fs.Duration("load-window", slicelet.DefaultLoadWindow, "how often the task reports the load it measured (one unit per key request) to slicerd")
	tlsCert := fs.String("tls-cert", os.Getenv("KVSERVER_TLS_CERT"), "certificate naming this task (spiffe://slicerd/task/JOB/TASK) for a slicerd cluster with TLS; env KVSERVER_TLS_CERT")
	tlsKey := fs.String("tls-key", os.Getenv("KVSERVER_TLS_KEY"), "private key of -tls-cert; env KVSERVER_TLS_KEY")
	tlsCA := fs.String("tls-ca", os.Getenv("KVSERVER_TLS_CA"), "CA certificate slicerd's certificates chain to; env KVSERVER_TLS_CA")
	consistency := fs.String("consistency", "affinity", "the job's consistency: affinity, or strong (serve a key only under the job's leases; the job must be configured strong)")
	await := fs.Duration("await", kvcache.DefaultAwait, "strong mode: how long a request for a key on its way to this task waits for it before the 421 (0: none)")
	leaseTTL := fs.Duration("lease-ttl", slicelet.DefaultLeaseTTL, "strong mode: lifetime of the guard and bridge reads this task asks for")
	backingURL := fs.String("backing", "", "base URL of a backing store to write through to and read misses from (kvcache.BackingHandler); strong mode writes carry fencing tokens")
	metricsAddr := fs.String("metrics-addr", "", "host:port to serve this task's Prometheus metrics on, at /metrics (the Slicelet's: assignment age and generation, lookups, misrouted requests); empty: none")
	recordFile := fs.String("record", "", "strong mode: append every satisfied request to this file in lease/leasecheck's record form (task, token, start and end in CLOCK_MONOTONIC nanoseconds, key), for checking the history")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cons, err := assign.ParseConsistency(*consistency)
	if err != nil {
		fmt.Fprintf(stderr, "kvserver: invalid -consistency %q: use affinity or strong\n", *consistency)
		return 2
	}
	if *await < 0 {
		fmt.Fprintf(stderr, "kvserver: invalid -await %v: use 0 or a positive duration such as 1s\n", *await)
		return 2
	}
	if *leaseTTL <= 0 {
		fmt.Fprintf(stderr, "kvserver: invalid -lease-ttl %v: use a positive duration such as 2s\n", *leaseTTL)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvserver: unexpected argument %q; kvserver takes flags only\n", fs.Arg(0))
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "kvserver: invalid -log-level %q: use debug, info, warn or error\n", *logLevel)
		return 2
	}
	if *loadWindow <= 0 {
		fmt.Fprintf(stderr, "kvserver: invalid -load-window %v: use a positive duration such as 5s\n", *loadWindow)
		return 2
	}
	if *profile != "lan" && *profile != "local" {
		fmt.Fprintf(stderr, "kvserver: invalid -gossip-profile %q: use lan or local\n", *profile)
		return 2
	}
	var keys [][]byte
	if *gossipKey != "" {
		key, err := gossip.ParseKey(*gossipKey)
		if err != nil {
			fmt.Fprintf(stderr, "kvserver: invalid -gossip-key: %v\n", err)
			return 2
		}
		keys = [][]byte{key}
	}
	base := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	log := base.With("task", *task) // the Slicelet tags its own records

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "kvserver: listen on %s: %v; choose another -addr\n", *addr, err)
		return 1
	}
	gcfg := gossip.DefaultConfig()
	gcfg.Profile = *profile
	gcfg.Keys, gcfg.KeyringFile = keys, *keyringFile
	var joins []string
	for _, j := range strings.Split(*join, ",") {
		if j = strings.TrimSpace(j); j != "" {
			joins = append(joins, j)
		}
	}
	cfg := slicelet.DefaultConfig()
	cfg.Job, cfg.Task, cfg.Addr, cfg.Capacity = *job, *task, ln.Addr().String(), *capacity
	cfg.GossipAddr, cfg.Join, cfg.Gossip = *gossipAddr, joins, gcfg
	cfg.LoadWindow, cfg.CacheFile, cfg.Logger = *loadWindow, *cacheFile, base
	cfg.Consistency, cfg.LeaseTTL = cons, *leaseTTL
	// The entries' size goes with every load report (so replicas and
	// limits elsewhere in the job see it too); the cache exists only once
	// the Slicelet does, so the report reads it through a pointer.
	var cache atomic.Pointer[kvcache.Server]
	cfg.MemoryLimit = *memoryLimit
	cfg.StateBytes = func(add func(assign.SliceKey, int64)) {
		if c := cache.Load(); c != nil {
			c.StateBytes(add)
		}
	}
	if *handoff {
		cfg.ExportState = func(ctx context.Context, start, end assign.SliceKey, emit func(k, v []byte) error) error {
			if c := cache.Load(); c != nil {
				return c.ExportState(ctx, start, end, emit)
			}
			return nil
		}
		cfg.ImportState = func(k, v []byte) {
			if c := cache.Load(); c != nil {
				c.ImportState(k, v)
			}
		}
	}
	if files := (tlsconfig.Files{Cert: *tlsCert, Key: *tlsKey, CA: *tlsCA}); files.Enabled() {
		if err := files.Validate("tls-", true); err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "kvserver: %v\n", strings.ReplaceAll(err.Error(), "--", "-"))
			return 2
		}
		src, err := tlsconfig.Load(files, base)
		if err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "kvserver: %v\n", err)
			return 2
		}
		cfg.TLS = src
	}
	var mln net.Listener // the metrics port, with -metrics-addr
	reg := kvcache.NewMetricsRegistry()
	if *metricsAddr != "" {
		cfg.Registerer = reg
		if mln, err = net.Listen("tcp", *metricsAddr); err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "kvserver: listen on %s: %v; choose another -metrics-addr\n", *metricsAddr, err)
			return 1
		}
		defer mln.Close()
	}
	sl, err := slicelet.New(cfg)
	if err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "kvserver: %v\n", err)
		return 2
	}
	opts := []kvcache.Option{kvcache.WithAwait(*await)}
	if *handoff {
		opts = append(opts, kvcache.WithHandoff(0))
	}
	if *backingURL != "" {
		opts = append(opts, kvcache.WithBacking(kvcache.HTTPBacking{Base: strings.TrimSuffix(*backingURL, "/"), Client: &http.Client{Timeout: 5 * time.Second}}))
	}
	if *recordFile != "" {
		rec, err := openRecord(*recordFile, *task)
		if err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "kvserver: -record: %v\n", err)
			return 1
		}
		defer rec.close()
		opts = append(opts, kvcache.WithRecorder(monotonic, rec.add))
	}
	kv := kvcache.NewServer(sl, log, opts...)
	cache.Store(kv)
	// HTTP/1 for clients, HTTP/2 for the handoff streams of the job's
	// other tasks. With TLS the task serves only TLS, presenting its task
	// certificate (clients and the other tasks check that it names this
	// task), and serves only callers whose certificate names a client or a
	// task of the job.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	var handler http.Handler = kv
	var tlsConfig *tls.Config
	if cfg.TLS != nil {
		protocols.SetHTTP2(true)
		tlsConfig = cfg.TLS.ServerConfig()
		handler = kvcache.RequireJobPeer(*job, kv)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	srv := &http.Server{
		Protocols:         protocols,
		Handler:           handler,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}

	// A signal (ctx) drains the task first, then stops it (runCtx).
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error {
		select {
		case <-gctx.Done():
			return nil
		case <-ctx.Done():
		}
		defer stop()
		if *drainTimeout <= 0 {
			return nil
		}
		log.Info("kvserver draining", "timeout", *drainTimeout)
		dctx, cancel := context.WithTimeout(gctx, *drainTimeout)
		defer cancel()
		if err := sl.Drain(dctx); err != nil {
			log.Warn("kvserver stopping before its keys all moved", "err", err)
		}
		return nil
	})
	g.Go(func() error { return sl.Run(gctx) })
	if mln != nil {
		g.Go(func() error { return kvcache.ServeMetrics(gctx, mln, reg) })
		log.Info("kvserver serving metrics", "metrics_addr", mln.Addr().String())
	}
	g.Go(func() error {
		serve := srv.Serve
		if tlsConfig != nil {
			serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
		}
		if err := serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		select {
		case <-sl.Joined():
			fmt.Fprintf(stdout, "kvserver task=%s addr=%s gossip=%s\n", *task, ln.Addr(), sl.GossipAddr())
		case <-gctx.Done():
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		// The Slicelet leaves gossip as gctx ends; requests in flight finish.
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			srv.Close()
		}
		return nil
	})
	log.Info("kvserver starting", "job", *job, "addr", ln.Addr().String(), "join", joins)
	if err := g.Wait(); err != nil {
		fmt.Fprintf(stderr, "kvserver: %v\n", err)
		return 1
	}
	log.Info("kvserver stopped")
	return 0
}
