// Command kvclient writes keys to the kvcache example through a Clerk and
// then shows, every interval, which task owns how many of them. See
// ../../README.md.
//
//	kvclient -job kv -distributor 127.0.0.1:7070 -keys 1000 -interval 1s [-cache-file kv.client.cache]
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
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/slicerd/slicerd/clerk"
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
	ck, err := clerk.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kvclient: %v\n", err)
		return 2
	}
	var mln net.Listener // the metrics port, with -metrics-addr
	if *metricsAddr != "" {
		if mln, err = net.Listen("tcp", *metricsAddr); err != nil {
			fmt.Fprintf(stderr, "kvclient: listen on %s: %v; choose another -metrics-addr\n", *metricsAddr, err)
			return 1
		}
		defer mln.Close()
	}
	client := kvcache.NewClient(ck, &http.Client{Timeout: 5 * time.Second})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ck.Run(gctx) })
	if mln != nil {
		g.Go(func() error { return kvcache.ServeMetrics(gctx, mln, reg) })
	}
	g.Go(func() error {
		defer stop() // a failure here ends the Clerk too
		return report(gctx, stdout, ck, client, *nkeys, *interval)
	})
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "kvclient: %v\n", err)
		return 1
	}
	return 0
}

func report(ctx context.Context, w io.Writer, ck *clerk.Clerk, client *kvcache.Client, nkeys int, interval time.Duration) error {
	fmt.Fprintf(w, "waiting for the first assignment of the job...\n")
	select {
	case <-ck.Ready():
	case <-ctx.Done():
		return nil
	}
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%06d", i)
	}
	written, failed := 0, 0
	for _, k := range keys {
		err := client.Put(ctx, k, []byte("value of "+k))
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
	for {
		// Read every key back and refill what the cache lost to moves, as
		// a client of a cache would from its database.
		misses := 0
		for _, k := range keys {
			_, ok, err := client.Get(ctx, k)
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
				if err := client.Put(ctx, k, []byte("value of "+k)); err != nil && ctx.Err() == nil && !errors.Is(err, kvcache.ErrNoOwner) {
					return err
				}
			}
		}
		owners := make(map[string]int)
		for _, k := range keys {
			if names := ck.AssignedTaskNames([]byte(k)); len(names) > 0 {
				owners[names[0]]++
			} else {
				owners["(none)"]++
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "generation %d:", ck.Generation())
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
