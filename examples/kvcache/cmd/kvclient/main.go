// Command kvclient writes keys to the kvcache example through a Clerk and
// then shows, every interval, which task owns how many of them. With -grpc
// it speaks the cache's gRPC API over a slicer:///JOB channel (package
// clerk/grpcroute) and shows which task served how many. See
// ../../README.md.
//
//	kvclient -job kv -distributor 127.0.0.1:7070 -keys 1000 -interval 1s [-cache-file kv.client.cache] [-grpc]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
	"github.com/slicerd/slicerd/clerk/grpcroute"
	"github.com/slicerd/slicerd/examples/kvcache"
	"github.com/slicerd/slicerd/tlsconfig"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvclient", flag.ContinueOnError)
	fs.SetOutput(stderr)
	job := fs.String("job", "kv", "job whose tasks serve the cache")
	dist := fs.String("distributor", "127.0.0.1:7070", "RPC address of a slicerd distributor, comma-separated for several")
	backup := fs.String("backup", "", "RPC address of a slicerd backup, comma-separated for several; tried when no distributor answers")
	nkeys := fs.Int("keys", 1000, "how many keys to write")
	interval := fs.Duration("interval", time.Second, "how often to report key ownership")
	logLevel := fs.String("log-level", "warn", "log verbosity: debug, info, warn or error")
	cacheFile := fs.String("cache-file", "", "file to keep the job's assignment in, so a restart routes at once even while slicerd is down (empty: no cache)")
	metricsAddr := fs.String("metrics-addr", "", "host:port to serve the Clerk's Prometheus metrics on, at /metrics (assignment age and generation, lookups); empty: none")
	tlsCert := fs.String("tls-cert", os.Getenv("KVCLIENT_TLS_CERT"), "client certificate for the job (spiffe://slicerd/client/JOB) for a slicerd cluster with TLS; env KVCLIENT_TLS_CERT")
	tlsKey := fs.String("tls-key", os.Getenv("KVCLIENT_TLS_KEY"), "private key of -tls-cert; env KVCLIENT_TLS_KEY")
	tlsCA := fs.String("tls-ca", os.Getenv("KVCLIENT_TLS_CA"), "CA certificate slicerd's certificates chain to; env KVCLIENT_TLS_CA")
	useGRPC := fs.Bool("grpc", false, "speak the cache's gRPC API over a key-routed slicer:///JOB channel (clerk/grpcroute) instead of HTTP with a Clerk")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvclient: unexpected argument %q; kvclient takes flags only\n", fs.Arg(0))
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(stderr, "kvclient: invalid -log-level %q: use debug, info, warn or error\n", *logLevel)
		return 2
	}
	if *nkeys < 0 || *interval <= 0 {
		fmt.Fprintln(stderr, "kvclient: -keys must not be negative and -interval must be positive")
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg := clerk.DefaultConfig()
	cfg.Job, cfg.Addrs, cfg.BackupAddrs, cfg.CacheFile, cfg.Logger = *job, splitAddrs(*dist), splitAddrs(*backup), *cacheFile, log
	if files := (tlsconfig.Files{Cert: *tlsCert, Key: *tlsKey, CA: *tlsCA}); files.Enabled() {
		if err := files.Validate("tls-", true); err != nil {
			fmt.Fprintf(stderr, "kvclient: %v\n", strings.ReplaceAll(err.Error(), "--", "-"))
			return 2
		}
		src, err := tlsconfig.Load(files, log)
		if err != nil {
			fmt.Fprintf(stderr, "kvclient: %v\n", err)
			return 2
		}
		cfg.TLS = src
	}
	reg := kvcache.NewMetricsRegistry()
	if *metricsAddr != "" {
		cfg.Registerer = reg
	}
	// The configuration is checked (exit 2) before anything is opened or
	// started.
	var st store
	var ck *clerk.Clerk // HTTP mode: run below
	if *useGRPC {
		gs, err := newGRPCStore(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "kvclient: %v\n", err)
			return 2
		}
		defer gs.conn.Close()
		st = gs
	} else {
		var err error
		if ck, err = clerk.New(cfg); err != nil {
			fmt.Fprintf(stderr, "kvclient: %v\n", err)
			return 2
		}
		st = &httpStore{ck: ck, c: kvcache.NewClient(ck, &http.Client{Timeout: 5 * time.Second})}
	}
	var mln net.Listener // the metrics port, with -metrics-addr
	if *metricsAddr != "" {
		var err error
		if mln, err = net.Listen("tcp", *metricsAddr); err != nil {
			fmt.Fprintf(stderr, "kvclient: listen on %s: %v; choose another -metrics-addr\n", *metricsAddr, err)
			return 1
		}
		defer mln.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	if mln != nil {
		g.Go(func() error { return kvcache.ServeMetrics(gctx, mln, reg) })
	}
	if ck != nil {
		g.Go(func() error { return ck.Run(gctx) })
	}
	g.Go(func() error {
		defer stop() // a failure here ends the Clerk too
		return report(gctx, stdout, st, *nkeys, *interval)
	})
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "kvclient: %v\n", err)
		return 1
	}
	return 0
}

// store is the cache as kvclient uses it, over HTTP or gRPC.
type store interface {
	ready() <-chan struct{}
	generation() uint64
	get(ctx context.Context, key string) (found bool, task string, err error)
	put(ctx context.Context, key string) error
	// owner is the task the key is counted for: its owner in the Clerk's
	// assignment over HTTP; over gRPC, the task that served it.
	owner(key, served string) string
}

// httpStore is the HTTP API through a Clerk.
type httpStore struct {
	ck *clerk.Clerk
	c  *kvcache.Client
}

func (h *httpStore) ready() <-chan struct{} { return h.ck.Ready() }
func (h *httpStore) generation() uint64     { return h.ck.Generation() }
func (h *httpStore) get(ctx context.Context, key string) (bool, string, error) {
	_, ok, err := h.c.Get(ctx, key)
	return ok, "", err
}
func (h *httpStore) put(ctx context.Context, key string) error {
	return h.c.Put(ctx, key, []byte("value of "+key))
}
func (h *httpStore) owner(key, _ string) string {
	if names := h.ck.AssignedTaskNames([]byte(key)); len(names) > 0 {
		return names[0]
	}
	return "(none)"
}

// grpcStore is the gRPC API over a slicer:///JOB channel.
type grpcStore struct {
	conn      *grpc.ClientConn
	c         *kvcache.GRPCClient
	gen       atomic.Uint64
	first     chan struct{} // closed at the first assignment
	firstOnce sync.Once
}

func newGRPCStore(cfg clerk.Config) (*grpcStore, error) {
	gs := &grpcStore{first: make(chan struct{})}
	job := cfg.Job
	cfg.Job = ""
	cfg.OnAssignment = func(_, next *assign.Assignment) {
		gs.gen.Store(next.Generation)
		gs.firstOnce.Do(func() { close(gs.first) })
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = grpcroute.TaskCredentials(cfg.TLS)
	}
	b, err := grpcroute.NewBuilder(grpcroute.Config{Clerk: cfg})
	if err != nil {
		return nil, err
	}
	gs.conn, err = grpc.NewClient(grpcroute.Scheme+":///"+job, grpc.WithResolvers(b), grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	gs.conn.Connect()
	gs.c = kvcache.NewGRPCClient(gs.conn)
	return gs, nil
}

func (g *grpcStore) ready() <-chan struct{} { return g.first }
func (g *grpcStore) generation() uint64     { return g.gen.Load() }
func (g *grpcStore) get(ctx context.Context, key string) (bool, string, error) {
	_, ok, task, err := g.c.Get(ctx, key)
	return ok, task, err
}
func (g *grpcStore) put(ctx context.Context, key string) error {
	_, err := g.c.Put(ctx, key, []byte("value of "+key))
	return err
}
func (g *grpcStore) owner(_, served string) string {
	if served == "" {
		return "(none)"
	}
	return served
}

func report(ctx context.Context, w io.Writer, st store, nkeys int, interval time.Duration) error {
	fmt.Fprintf(w, "waiting for the first assignment of the job...\n")
	select {
	case <-st.ready():
	case <-ctx.Done():
		return nil
	}
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%06d", i)
	}
	written, failed := 0, 0
	for _, k := range keys {
		err := st.put(ctx, k)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, kvcache.ErrNoOwner):
			failed++ // the owner is moving; the refill below retries it
		case err != nil:
			return err
		default:
			written++
		}
	}
	fmt.Fprintf(w, "wrote %d keys (%d found no owner)\n", written, failed)

	t := time.NewTicker(interval)
	defer t.Stop()
	served := make([]string, len(keys))
	for {
		// Read every key back and refill what the cache lost to moves, as
		// a client of a cache would from its database.
		misses := 0
		for i, k := range keys {
			ok, task, err := st.get(ctx, k)
			served[i] = task
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, kvcache.ErrNoOwner) {
					misses++
					continue
				}
				return err
			}
			if !ok {
				misses++
				if err := st.put(ctx, k); err != nil && ctx.Err() == nil && !errors.Is(err, kvcache.ErrNoOwner) {
					return err
				}
			}
		}
		owners := make(map[string]int)
		for i, k := range keys {
			owners[st.owner(k, served[i])]++
		}
		var b strings.Builder
		fmt.Fprintf(&b, "generation %d:", st.generation())
		for _, task := range slices.Sorted(maps.Keys(owners)) {
			fmt.Fprintf(&b, " %s=%d", task, owners[task])
		}
		fmt.Fprintf(&b, "  (misses refilled: %d)\n", misses)
		io.WriteString(w, b.String())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// splitAddrs splits a comma-separated address list, dropping blanks.
func splitAddrs(list string) []string {
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}
