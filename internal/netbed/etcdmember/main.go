// Command etcdmember is one member of an etcd cluster, built from the etcd
// server library slicerd already depends on, so the partition test bed
// (internal/netbed, bench/partition) runs a real multi-member etcd without
// an etcd installed. It is for tests and benchmarks only.
//
//	etcdmember -name e1 -dir DIR -client http://198.18.1.1:2379 -peer http://198.18.1.1:2380 \
//	    -cluster e1=http://198.18.1.1:2380,e2=http://198.18.1.2:2380,e3=http://198.18.1.3:2380
//
// It prints "etcdmember ready" once the member has joined the cluster and
// serves clients, and stops on SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("etcdmember", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "this member's name, as in -cluster")
	dir := fs.String("dir", "", "data directory")
	client := fs.String("client", "", "URL clients reach this member at (listened on and advertised)")
	peer := fs.String("peer", "", "URL the other members reach this member at (listened on and advertised)")
	cluster := fs.String("cluster", "", "every member as name=peer-URL, comma-separated (etcd's --initial-cluster)")
	logs := fs.Bool("log", false, "log etcd's own lines (zap, JSON) to stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cu, err1 := url.Parse(*client)
	pu, err2 := url.Parse(*peer)
	if *name == "" || *dir == "" || *cluster == "" || err1 != nil || err2 != nil || cu.Host == "" || pu.Host == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "etcdmember: need -name, -dir, -client and -peer URLs, and -cluster, and no arguments")
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = *name, *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = *cluster
	cfg.InitialClusterToken = "slicerd-netbed"
	if !*logs {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "etcdmember: start %s: %v\n", *name, err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(stdout, "etcdmember ready name=%s client=%s\n", *name, cu)
	case err := <-e.Err():
		fmt.Fprintf(stderr, "etcdmember: %s failed: %v\n", *name, err)
		return 1
	case <-ctx.Done():
		return 0
	case <-time.After(60 * time.Second):
		fmt.Fprintf(stderr, "etcdmember: %s did not join its cluster within 60s\n", *name)
		return 1
	}
	select {
	case err := <-e.Err():
		fmt.Fprintf(stderr, "etcdmember: %s failed: %v\n", *name, err)
		return 1
	case <-ctx.Done():
		return 0
	}
}
