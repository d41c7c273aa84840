package cli

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/slicerd/slicerd/roles"
)

// agentState is what systemdNotifier needs of a running agent; *roles.Agent
// has it.
type agentState interface {
	Ready() <-chan struct{}
	ShuttingDown() <-chan struct{}
	Check() error
}

// startSystemdNotify tells systemd, over $NOTIFY_SOCKET, that the agent is
// ready (READY=1) and that it is stopping (STOPPING=1), and keeps systemd's
// watchdog fed (WATCHDOG=1) at half of $WATCHDOG_USEC while agent.Check
// passes, from readiness until shutdown begins. Outside a Type=notify unit
// (no $NOTIFY_SOCKET) it does nothing. The returned function stops it and
// waits for it; call it once Run has returned.
func startSystemdNotify(agent agentState, status string, log *slog.Logger) (stop func()) {
	if os.Getenv("NOTIFY_SOCKET") == "" {
		return func() {}
	}
	log = log.With("component", "systemd")
	watchdog := watchdogInterval(log)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		runSystemdNotify(agent, status, watchdog, done, log)
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// watchdogInterval is the watchdog timeout systemd gives this process in
// $WATCHDOG_USEC, or 0 when there is none for it: unset, unreadable, or
// meant for another process ($WATCHDOG_PID).
func watchdogInterval(log *slog.Logger) time.Duration {
	watchdog, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("ignoring the systemd watchdog setting; no keep-alives will be sent", "err", err)
		return 0
	}
	return watchdog
}

// runSystemdNotify sends every notification from one goroutine, so that
// systemd receives them in order: READY=1, keep-alives, STOPPING=1, and no
// keep-alive after STOPPING=1 (systemd no longer expects them then).
func runSystemdNotify(agent agentState, status string, watchdog time.Duration, done <-chan struct{}, log *slog.Logger) {
	ready, shuttingDown := agent.Ready(), agent.ShuttingDown()
	var keepAlive <-chan time.Time // nil until ready, and again once stopping
	var ticker *time.Ticker
	stopTicker := func() {
		if ticker != nil {
			ticker.Stop()
			ticker, keepAlive = nil, nil
		}
	}
	defer stopTicker()
	for {
		select {
		case <-done:
			return
		case <-ready:
			ready = nil
			select {
			case <-shuttingDown:
				continue // stopping already: never READY=1 after STOPPING=1
			default:
			}
			sdNotify(log, daemon.SdNotifyReady+"\nSTATUS="+status)
			if watchdog > 0 {
				ticker = time.NewTicker(watchdog / 2)
				keepAlive = ticker.C
				log.Debug("sending systemd watchdog keep-alives", "watchdog", watchdog, "every", watchdog/2)
			}
		case <-shuttingDown:
			shuttingDown, ready = nil, nil
			stopTicker()
			sdNotify(log, daemon.SdNotifyStopping+"\nSTATUS=shutting down: leaving gossip, draining streams")
		case <-keepAlive:
			// A missed keep-alive is what makes systemd restart a wedged
			// node; one that is merely unhealthy says so in the journal.
			if err := agent.Check(); err != nil {
				log.Warn("withholding the systemd watchdog keep-alive", "err", err)
				continue
			}
			sdNotify(log, daemon.SdNotifyWatchdog)
		}
	}
}

func sdNotify(log *slog.Logger, state string) {
	sent, err := daemon.SdNotify(false, state)
	switch {
	case err != nil:
		log.Warn("notifying systemd failed", "state", state, "socket", os.Getenv("NOTIFY_SOCKET"), "err", err)
	case sent:
		log.Debug("notified systemd", "state", state)
	}
}

// systemdStatus is the STATUS= line systemctl status shows for a ready
// agent.
func systemdStatus(cfg roles.Config, rpcAddr string) string {
	names := make([]string, len(cfg.Roles))
	for i, r := range cfg.Roles {
		names[i] = string(r)
	}
	return fmt.Sprintf("serving %s on %s", strings.Join(names, ","), rpcAddr)
}
