package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sync/errgroup"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/gossip"
	"github.com/slicerd/slicerd/lease"
	"github.com/slicerd/slicerd/slicelet"
)

// SidecarCommand runs a task's Slicelet beside an application written in
// any language: it joins the job as the task, serving at the application's
// address, gives the task's keys away while the application fails its
// health check, and drains on SIGTERM.
func SidecarCommand() *cli.Command {
	return &cli.Command{
		Name:      "sidecar",
		Usage:     "make an application in any language a task of a job: join as the task, follow its health, drain on SIGTERM",
		ArgsUsage: " ",
		Description: "The sidecar is the task's member of slicerd, as the slicelet library is inside a Go task: it joins\n" +
			"gossip as task --task of job --job, advertising --app-addr as the address clients reach the task at,\n" +
			"and the job's keys are assigned to it as to any task. Run it beside the application (the systemd\n" +
			"template dist/systemd/slicerd-sidecar@.service binds it to the application's unit).\n\n" +
			"It checks the application every --health-interval (a TCP connect to --app-addr, or an HTTP GET of\n" +
			"--health-url that must answer 2xx), and joins only once a check has passed. After --health-failures\n" +
			"failures in a row the task drains: its\n" +
			"keys move to the job's other tasks while it stays a member; the first success after that gives it\n" +
			"keys again. On SIGTERM or SIGINT it drains (at most --drain-timeout) and exits 0, so the application\n" +
			"can stop once the sidecar has. With TLS it presents the task's certificate\n" +
			"(spiffe://slicerd/task/JOB/TASK) and registers with the Assigners as a Go task does.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "job", EnvVars: []string{"SLICERD_SIDECAR_JOB"}, Usage: "the job the application serves"},
			&cli.StringFlag{Name: "task", EnvVars: []string{"SLICERD_SIDECAR_TASK"},
				Usage: "the task's name, stable across restarts (for example the host name, or kv-0)"},
			&cli.StringFlag{Name: "app-addr", EnvVars: []string{"SLICERD_SIDECAR_APP_ADDR"},
				Usage: "host:port where clients reach the application; the assignment names it, and the TCP health check connects to it"},
			&cli.StringSliceFlag{Name: "join", EnvVars: []string{"SLICERD_JOIN"},
				Usage: "gossip addresses (host:port) of slicerd nodes to join, comma-separated or repeated"},
			&cli.StringFlag{Name: "gossip-addr", EnvVars: []string{"SLICERD_GOSSIP_ADDR"}, Value: "127.0.0.1:0",
				Usage: "host:port the task's gossip member binds; port 0 picks a free one. Use an address the slicerd nodes can reach"},
			gossipProfileFlag(),
			gossipKeyFlag(),
			&cli.StringFlag{Name: "gossip-keyring-file", EnvVars: []string{"SLICERD_GOSSIP_KEYRING_FILE"},
				Usage: "file that keeps the task's gossip keys across restarts (created from --gossip-key if missing), so that a task " +
					"restarted after a key rotation still joins (default: none)"},
			&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"SLICERD_TLS_CERT"}, Usage: "the task's certificate (spiffe://slicerd/task/JOB/TASK), PEM, for a slicerd cluster with TLS"},
			&cli.StringFlag{Name: "tls-key", EnvVars: []string{"SLICERD_TLS_KEY"}, Usage: "private key of --tls-cert, PEM"},
			&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"SLICERD_TLS_CA"}, Usage: "CA certificate slicerd's certificates chain to, PEM"},
			&cli.Float64Flag{Name: "capacity", EnvVars: []string{"SLICERD_SIDECAR_CAPACITY"}, Usage: "the task's relative capacity: 2 carries twice the load of 1 (default 1)"},
			&cli.StringFlag{Name: "health-url", EnvVars: []string{"SLICERD_SIDECAR_HEALTH_URL"},
				Usage: "http:// URL the application answers 2xx on while healthy (default: a TCP connect to --app-addr)"},
			&cli.DurationFlag{Name: "health-interval", EnvVars: []string{"SLICERD_SIDECAR_HEALTH_INTERVAL"}, Value: 500 * time.Millisecond, Usage: "how often to check the application"},
			&cli.DurationFlag{Name: "health-timeout", EnvVars: []string{"SLICERD_SIDECAR_HEALTH_TIMEOUT"}, Value: time.Second, Usage: "how long one check may take"},
			&cli.IntFlag{Name: "health-failures", EnvVars: []string{"SLICERD_SIDECAR_HEALTH_FAILURES"}, Value: 3,
				Usage: "failed checks in a row that make the task give its keys away"},
			&cli.DurationFlag{Name: "drain-timeout", EnvVars: []string{"SLICERD_SIDECAR_DRAIN_TIMEOUT"}, Value: 30 * time.Second,
				Usage: "on SIGTERM, how long to wait for the task's keys to move before exiting"},
			&cli.StringFlag{Name: "local-api-socket", EnvVars: []string{"SLICERD_SIDECAR_LOCAL_API_SOCKET"},
				Usage: "serve the application the local API (slicer.v1.SidecarService: its key ranges, load, drain; docs/api.md) on a Unix socket at this path, " +
					"mode 0600: only the sidecar's user and root may use it (default: no local API)"},
			&cli.StringFlag{Name: "app-state-socket", EnvVars: []string{"SLICERD_SIDECAR_APP_STATE_SOCKET"},
				Usage: "state handoff: the Unix socket where the application serves slicer.v1.TaskStateService (export and import of its keys' state; " +
					"docs/sidecar.md); needs --handoff-addr (default: keys move without their state)"},
			&cli.StringFlag{Name: "handoff-addr", EnvVars: []string{"SLICERD_SIDECAR_HANDOFF_ADDR"},
				Usage: "state handoff: host:port where the sidecar serves the job's other tasks the state of keys this task loses (HandoffService, " +
					"advertised in gossip; with TLS only to tasks of the job); port 0 picks a free one. Use an address the other tasks can reach"},
			&cli.DurationFlag{Name: "load-window", EnvVars: []string{"SLICERD_SIDECAR_LOAD_WINDOW"}, Value: slicelet.DefaultLoadWindow,
				Usage: "how often the task reports the load the application measured (ReportLoad on the local API) to slicerd"},
			&cli.StringFlag{Name: "consistency", EnvVars: []string{"SLICERD_SIDECAR_CONSISTENCY"}, Value: "affinity",
				Usage: "the job's consistency: affinity, or strong (the task uses its keys only under the job's leases, and the application " +
					"takes handles with fencing tokens over the local API; the job must be configured strong, docs/consistency.md)"},
			&cli.DurationFlag{Name: "lease-ttl", EnvVars: []string{"SLICERD_SIDECAR_LEASE_TTL"}, Value: slicelet.DefaultLeaseTTL,
				Usage: "strong mode: lifetime of the guard and bridge leases the task asks for"},
			&cli.DurationFlag{Name: "release-wait", EnvVars: []string{"SLICERD_SIDECAR_RELEASE_WAIT"}, Value: slicelet.DefaultReleaseWait,
				Usage: "strong mode: how long a key leaving the task waits for the application to release its handles on it"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"SLICERD_LOG_LEVEL"}, Usage: "log verbosity: debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"SLICERD_LOG_FORMAT"}, Usage: "log format: text or json (one object per line)"},
		},
		OnUsageError: subcommandUsageError,
		Action:       runSidecar,
	}
}

// sidecarConfig is what runSidecar runs, checked.
type sidecarConfig struct {
	slicelet     slicelet.Config
	check        func(context.Context) error
	interval     time.Duration
	timeout      time.Duration // of one check
	failures     int
	drainTimeout time.Duration
	localSocket  string // the local API's Unix socket; "" for none
	appState     string // the application's TaskStateService socket; "" for no handoff
	handoffAddr  string // where to serve HandoffService, with appState
}

// sidecarState is what systemd's notifications follow (agentState): ready
// once the task has joined, stopping once a signal came, and healthy while
// the health loop keeps checking the application, whatever it finds: a
// keep-alive is withheld only when the loop itself is stuck.
type sidecarState struct {
	sl       *slicelet.Slicelet
	stopping <-chan struct{}
	stall    time.Duration
	checked  atomic.Int64 // when the last health check ended (Unix ns); 0 before the first
	// appDrained is set while a drain the application asked for over the
	// local API holds; the health loop does not end it.
	appDrained atomic.Bool
	// healthDrained is set while the health loop holds the task drained.
	healthDrained atomic.Bool
}

func (s *sidecarState) Ready() <-chan struct{}        { return s.sl.Joined() }
func (s *sidecarState) ShuttingDown() <-chan struct{} { return s.stopping }

func (s *sidecarState) Check() error {
	last := s.checked.Load()
	if last == 0 {
		return nil // the first check is under way
	}
	if since := time.Since(time.Unix(0, last)); since > s.stall {
		return fmt.Errorf("sidecar: no health check of the application has ended for %v", since.Round(time.Millisecond))
	}
	return nil
}

func parseSidecar(c *cli.Context, log *slog.Logger) (sidecarConfig, error) {
	if c.Args().Present() {
		return sidecarConfig{}, usageError("sidecar takes flags only, not %q", c.Args().First())
	}
	sc := sidecarConfig{interval: c.Duration("health-interval"), timeout: c.Duration("health-timeout"), failures: c.Int("health-failures"),
		drainTimeout: c.Duration("drain-timeout"), localSocket: c.String("local-api-socket")}
	job, task, app := c.String("job"), c.String("task"), c.String("app-addr")
	for _, f := range []struct{ name, val, env string }{
		{"job", job, "SLICERD_SIDECAR_JOB"}, {"task", task, "SLICERD_SIDECAR_TASK"}, {"app-addr", app, "SLICERD_SIDECAR_APP_ADDR"},
	} {
		if f.val == "" {
			return sc, usageError("--%s is required (or %s); see 'slicerd sidecar --help'", f.name, f.env)
		}
	}
	if err := assign.ValidateJobName(job); err != nil {
		return sc, usageError("invalid --job: %v", err)
	}
	if err := assign.ValidateTaskName(task); err != nil {
		return sc, usageError("invalid --task: %v", err)
	}
	if err := gossip.ValidateRPCAddr(app); err != nil {
		return sc, usageError("invalid --app-addr %q: %v", app, err)
	}
	timeout := sc.timeout
	switch {
	case sc.interval <= 0 || timeout <= 0:
		return sc, usageError("--health-interval %v and --health-timeout %v must be positive", sc.interval, timeout)
	case sc.failures < 1:
		return sc, usageError("invalid --health-failures %d: use 1 or more", sc.failures)
	case sc.drainTimeout < 0:
		return sc, usageError("invalid --drain-timeout %v: use 0 (exit at once) or more", sc.drainTimeout)
	}
	cons, err := assign.ParseConsistency(c.String("consistency"))
	if err != nil {
		return sc, usageError("invalid --consistency %q: use affinity or strong", c.String("consistency"))
	}
	if ttl := c.Duration("lease-ttl"); ttl <= 0 || ttl > lease.MaxTTL {
		return sc, usageError("invalid --lease-ttl %v: use a positive duration up to %v, such as %v", ttl, lease.MaxTTL, slicelet.DefaultLeaseTTL)
	}
	if w := c.Duration("load-window"); w <= 0 {
		return sc, usageError("invalid --load-window %v: use a positive duration, such as %v", w, slicelet.DefaultLoadWindow)
	}
	if w := c.Duration("release-wait"); w <= 0 {
		return sc, usageError("invalid --release-wait %v: use a positive duration, such as %v", w, slicelet.DefaultReleaseWait)
	}
	cfg := slicelet.Config{Job: job, Task: task, Addr: app, GossipAddr: c.String("gossip-addr"), Capacity: c.Float64("capacity"), Logger: log,
		Consistency: cons, LeaseTTL: c.Duration("lease-ttl"), ReleaseWait: c.Duration("release-wait"), LoadWindow: c.Duration("load-window")}
	for _, j := range c.StringSlice("join") {
		for _, addr := range strings.Split(j, ",") {
			if addr = strings.TrimSpace(addr); addr != "" {
				cfg.Join = append(cfg.Join, addr)
			}
		}
	}
	if len(cfg.Join) == 0 {
		return sc, usageError("no --join: give the gossip address of at least one slicerd node (SLICERD_JOIN)")
	}
	if s := c.String("gossip-key"); s != "" || c.String("gossip-keyring-file") != "" {
		cfg.Gossip = gossip.DefaultConfig()
		if s != "" {
			key, err := gossip.ParseKey(strings.TrimSpace(s))
			if err != nil {
				return sc, usageError("invalid --gossip-key: %v", err)
			}
			cfg.Gossip.Keys = [][]byte{key}
		}
		cfg.Gossip.KeyringFile = c.String("gossip-keyring-file")
	}
	profile, err := gossipProfile(c)
	if err != nil {
		return sc, err
	}
	if profile != gossip.ProfileLAN {
		if cfg.Gossip.Profile == "" { // not set from the gossip key above
			cfg.Gossip = gossip.DefaultConfig()
		}
		cfg.Gossip.Profile = profile
	}
	src, err := tlsFlags(c, log)
	if err != nil {
		return sc, err
	}
	cfg.TLS = src
	sc.slicelet = cfg
	if raw := c.String("health-url"); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return sc, usageError("invalid --health-url %q: use an http:// URL of the application, such as http://127.0.0.1:8080/healthz", raw)
		}
		hc := &http.Client{Timeout: timeout}
		sc.check = func(ctx context.Context) error { return httpCheck(ctx, hc, raw) }
	} else {
		sc.check = func(ctx context.Context) error {
			conn, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", app)
			if err != nil {
				return err
			}
			return conn.Close()
		}
	}
	sc.appState, sc.handoffAddr = c.String("app-state-socket"), c.String("handoff-addr")
	switch {
	case (sc.appState == "") != (sc.handoffAddr == ""):
		return sc, usageError("--app-state-socket and --handoff-addr go together: the first reaches the application's state, the second serves it to the job's other tasks")
	case sc.handoffAddr != "":
		host, port, err := net.SplitHostPort(sc.handoffAddr)
		ip := net.ParseIP(host)
		if p, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || host == "" || (ip != nil && ip.IsUnspecified()) || (port != "0" && p == 0) {
			return sc, usageError("invalid --handoff-addr %q: give host:port with the host the job's other tasks reach this one at (port 0 picks a free one), such as 10.0.0.5:7000", sc.handoffAddr)
		}
		if sc.localSocket == "" {
			return sc, usageError("state handoff needs --local-api-socket too: the application waits for a key's state there (AwaitState)")
		}
	}
	if c.IsSet("local-api-socket") && sc.localSocket == "" {
		return sc, usageError("--local-api-socket is empty; give the path of the Unix socket to create, or leave the flag out")
	}
	return sc, nil
}

// httpCheck GETs url and wants a 2xx answer.
func httpCheck(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func runSidecar(c *cli.Context) error {
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	sc, err := parseSidecar(c, log)
	if err != nil {
		return err
	}
	sc.slicelet.Logger = log // the Slicelet names the job and task in its own lines
	log = log.With("job", sc.slicelet.Job, "task", sc.slicelet.Task)
	var handoffLn net.Listener
	if sc.appState != "" {
		if handoffLn, err = net.Listen("tcp", sc.handoffAddr); err != nil {
			return cli.Exit(fmt.Sprintf("sidecar: --handoff-addr: %v", err), 1)
		}
		defer handoffLn.Close()
		sc.slicelet.HandoffAddr = handoffLn.Addr().String()
		withAppState(&sc.slicelet, sc.appState, log)
	}
	sl, err := slicelet.New(sc.slicelet)
	if err != nil {
		return usageError("%v", err)
	}
	ctx, stop := signalContext(c.Context, log)
	defer stop()
	state := &sidecarState{sl: sl, stopping: ctx.Done(), stall: 3*sc.interval + sc.timeout}
	var local *localAPI
	var localLn net.Listener
	if sc.localSocket != "" {
		if localLn, err = listenLocal(sc.localSocket); err != nil {
			return cli.Exit(fmt.Sprintf("sidecar: local API: %v", err), 1)
		}
		local = newLocalAPI(sl, state, log)
	}
	stopNotify := startSystemdNotify(state, fmt.Sprintf("task %s/%s, serving at %s", sc.slicelet.Job, sc.slicelet.Task, sc.slicelet.Addr), log)
	defer stopNotify() // after the Slicelet has stopped: deferred calls run in reverse
	// The Slicelet runs until the drain that follows the signal is over.
	runCtx, end := context.WithCancel(context.WithoutCancel(c.Context))
	defer end()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error {
		if !awaitHealthy(ctx, sc, state, log) {
			return nil // stopped before the application ever passed a check
		}
		return sl.Run(gctx)
	})
	if local != nil {
		g.Go(func() error { return serveLocal(gctx, localLn, local, sc.localSocket) })
		log.Info("sidecar local API serving", "socket", sc.localSocket)
	}
	if handoffLn != nil {
		var tlsConfig *tls.Config
		if sc.slicelet.TLS != nil {
			tlsConfig = sc.slicelet.TLS.ServerConfig()
		}
		g.Go(func() error { return serveHandoff(gctx, handoffLn, sl, tlsConfig, log) })
		log.Info("sidecar serving state handoff", "handoff_addr", sc.slicelet.HandoffAddr, "app_state_socket", sc.appState)
	}
	g.Go(func() error {
		followHealth(ctx, sl, sc, state, log)
		if gctx.Err() != nil {
			return nil // the Slicelet stopped first
		}
		select {
		case <-sl.Joined():
		default:
			end() // never joined: nothing to drain
			return nil
		}
		if sc.drainTimeout > 0 {
			log.Info("sidecar draining", "timeout", sc.drainTimeout)
			dctx, cancel := context.WithTimeout(gctx, sc.drainTimeout)
			if err := sl.Drain(dctx); err != nil {
				log.Warn("sidecar stopping before the task's keys all moved", "err", err)
			}
			cancel()
		}
		end()
		return nil
	})
	log.Info("sidecar starting", "app_addr", sc.slicelet.Addr, "join", sc.slicelet.Join)
	err = g.Wait()
	if local != nil {
		local.handles.releaseAll() // the Slicelet has stopped
	}
	if err != nil {
		return cli.Exit(fmt.Sprintf("sidecar: %v", err), 1)
	}
	log.Info("sidecar stopped")
	return nil
}

// awaitHealthy checks the application every interval until a check passes
// (true) or ctx ends (false), recording each check for the watchdog: the
// task joins only once its application serves, so that no key, and no
// handed-off state, reaches it before the application can take them.
func awaitHealthy(ctx context.Context, sc sidecarConfig, state *sidecarState, log *slog.Logger) bool {
	tick := time.NewTicker(sc.interval)
	defer tick.Stop()
	for logged := false; ; {
		err := sc.check(ctx)
		if ctx.Err() != nil {
			return false
		}
		state.checked.Store(time.Now().UnixNano())
		if err == nil {
			return true
		}
		if !logged {
			log.Info("sidecar: waiting for the application to pass a health check before the task joins", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// followHealth checks the application every interval until ctx ends: after
// sc.failures failed checks in a row the task drains, and the first good
// check after that undrains it. It records each check's end in state,
// which feeds the systemd watchdog.
func followHealth(ctx context.Context, sl *slicelet.Slicelet, sc sidecarConfig, state *sidecarState, log *slog.Logger) {
	select {
	case <-sl.Joined():
	case <-ctx.Done():
		return
	}
	tick := time.NewTicker(sc.interval)
	defer tick.Stop()
	var draining sync.WaitGroup // the drains started below end with ctx
	defer draining.Wait()
	failed := 0
	for {
		err := sc.check(ctx)
		if ctx.Err() != nil {
			return
		}
		state.checked.Store(time.Now().UnixNano())
		drained := state.healthDrained.Load()
		switch {
		case err == nil && drained && state.appDrained.Load():
			// The application asked for the drain: it ends it.
			failed = 0
			state.healthDrained.Store(false)
		case err == nil && drained:
			if uerr := sl.Undrain(); uerr != nil {
				log.Warn("sidecar: the application is healthy again, but undraining the task failed; retrying", "err", uerr)
				break
			}
			log.Info("sidecar: the application is healthy again; the task takes keys again")
			failed = 0
			state.healthDrained.Store(false)
		case err == nil:
			failed = 0
		default:
			failed++
			if failed == sc.failures && !drained {
				log.Warn("sidecar: the application failed its health check; the task gives its keys away until it passes again",
					"failures", failed, "err", err)
				// Drain advertises the drain at once and then waits for the
				// keys to move; the health loop does not wait with it.
				draining.Go(func() {
					dctx, cancel := context.WithTimeout(ctx, sc.drainTimeout+time.Second)
					defer cancel()
					_ = sl.Drain(dctx)
				})
				state.healthDrained.Store(true)
			} else if !drained {
				log.Debug("sidecar: health check failed", "failures", failed, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
