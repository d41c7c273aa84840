package grpcroute

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"

	"github.com/slicerd/slicerd/tlsconfig"
)

// taskKey is the address attribute naming the task at an address.
type taskKey struct{}

type taskRef struct{ job, task string }

// Equal lets gRPC compare addresses carrying a taskRef.
func (t taskRef) Equal(o any) bool { u, ok := o.(taskRef); return ok && t == u }

// TaskCredentials returns transport credentials for a slicer:/// channel in
// a cluster with TLS: each connection presents the client's certificate
// from src and accepts the server only if its certificate chains to src's
// CA and names the task the assignment places at that address
// (spiffe://slicerd/task/JOB/TASK). An address that reached the assignment
// without belonging to the task (a forged gossip claim, a port another
// process took) so reaches nobody. Connections to Config.Fallback
// addresses, which name no task, are refused.
func TaskCredentials(src *tlsconfig.Source) credentials.TransportCredentials {
	return &taskCreds{src: src}
}

type taskCreds struct {
	src *tlsconfig.Source
}

var errNoTaskName = errors.New("grpcroute: the address names no task of the job (TaskCredentials connect only to tasks of a slicer:/// channel's assignment)")

func (c *taskCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	info := credentials.ClientHandshakeInfoFromContext(ctx)
	ref, ok := info.Attributes.Value(taskKey{}).(taskRef)
	if !ok {
		return nil, nil, errNoTaskName
	}
	cfg := c.src.ClientConfig(tlsconfig.WantTask(ref.job, ref.task))
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("grpcroute: task %s/%s at %s: %w", ref.job, ref.task, raw.RemoteAddr(), err)
	}
	return conn, credentials.TLSInfo{State: conn.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (c *taskCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("grpcroute: TaskCredentials are for clients")
}

func (c *taskCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (c *taskCreds) Clone() credentials.TransportCredentials { return &taskCreds{src: c.src} }

// OverrideServerName is part of the deprecated interface; names play no
// part in the check.
func (c *taskCreds) OverrideServerName(string) error { return nil }
