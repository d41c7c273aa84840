package clerk

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/slicerd/slicerd/tlsconfig"
)

// TaskAt returns the name of the task that the current assignment places
// at addr (host:port), and false when it places none there.
func (c *Clerk) TaskAt(addr string) (string, bool) {
	t := c.table.Load()
	if t == nil {
		return "", false
	}
	for _, task := range t.a.Tasks {
		if task.Addr == addr {
			return task.Name, true
		}
	}
	return "", false
}

// TaskTLS returns the TLS configuration for a connection to the task that
// the current assignment places at addr. It presents the Clerk's own
// certificate and accepts the server only if its certificate chains to the
// Clerk's CA and names that task of the Clerk's job, so an address that
// reached the assignment without belonging to the task (a forged gossip
// claim, a stale entry, a port another process took) reaches nobody. It
// returns nil and no error when the Clerk has no TLS, and an error when
// the assignment places no task at addr. The configuration offers HTTP/2
// and HTTP/1.1; set NextProtos to narrow it.
func (c *Clerk) TaskTLS(addr string) (*tls.Config, error) {
	if c.cfg.TLS == nil {
		return nil, nil
	}
	task, ok := c.TaskAt(addr)
	if !ok {
		return nil, fmt.Errorf("clerk: job %q: the assignment places no task at %s", c.cfg.Job, addr)
	}
	cfg := c.cfg.TLS.ClientConfig(tlsconfig.WantTask(c.cfg.Job, task))
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return cfg, nil
}

// TLS reports whether the Clerk was configured with TLS, and so whether
// TaskTLS returns a configuration.
func (c *Clerk) TLS() bool { return c.cfg.TLS != nil }

// DialTaskTLS connects to the task that the current assignment places at
// addr and completes the TLS handshake with TaskTLS's configuration, so the
// connection reaches only that task. It fits http.Transport's
// DialTLSContext (with ForceAttemptHTTP2 the transport speaks HTTP/2 when
// the task offers it); use URLs with the https scheme. It fails when the
// Clerk has no TLS.
func (c *Clerk) DialTaskTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	cfg, err := c.TaskTLS(addr)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, fmt.Errorf("clerk: job %q: DialTaskTLS needs a Clerk configured with TLS", c.cfg.Job)
	}
	d := tls.Dialer{Config: cfg}
	return d.DialContext(ctx, network, addr)
}
