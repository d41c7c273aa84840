package benchproc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a single-member etcd server embedded in the harness's process,
// on loopback, for slicerd's shared store (--store etcd://Addr/prefix/).
// Stop and Restart keep its ports and data.
type Etcd struct {
	Addr      string // client address, host:port
	dir, peer string
	e         *embed.Etcd
}

// FreeAddr returns a loopback address free a moment ago, for a listener
// whose address must be known before its process starts (another process
// may take it in between: harnesses only).
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// StartEtcd starts an etcd server with its data in dir.
func StartEtcd(dir string) (*Etcd, error) {
	free := FreeAddr
	client, err := free()
	if err != nil {
		return nil, err
	}
	peer, err := free()
	if err != nil {
		return nil, err
	}
	s := &Etcd{dir: dir, Addr: client, peer: peer}
	return s, s.Restart()
}

// Restart starts a stopped server again on the same ports and data.
func (s *Etcd) Restart() error {
	cfg := embed.NewConfig()
	cfg.Name = "benchproc"
	cfg.Dir = s.dir
	cu, _ := url.Parse("http://" + s.Addr)
	pu, _ := url.Parse("http://" + s.peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return errors.New("etcd not ready within 30s")
	}
	s.e = e
	return nil
}

// Stop stops the server; stopping a stopped server does nothing.
func (s *Etcd) Stop() {
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}
