package rpc

import (
	"net/http"
	"sync"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/identity"
	"github.com/slicerd/slicerd/tlsconfig"
)

// Peers are the HTTP clients an agent calls other agents with. With
// TLS, each gossip member gets its own client, which accepts only a server
// whose certificate names that member in the expected role: an address
// learned from gossip is trusted for what the certificate behind it says.
type Peers struct {
	tls   *tlsconfig.Source // nil: cleartext, peers trusted
	plain *http.Client

	mu      sync.Mutex
	clients map[peerKey]*http.Client
}

type peerKey struct {
	role identity.Role
	node string
}

// NewPeers returns the clients of an agent with TLS from src, or
// cleartext HTTP/2 for a nil src.
func NewPeers(src *tlsconfig.Source) *Peers {
	pc := &Peers{tls: src, clients: map[peerKey]*http.Client{}}
	if src == nil {
		pc.plain = api.NewH2CClient()
	}
	return pc
}

// Get returns the client for member node in role, and the base URL of addr.
func (pc *Peers) Get(role identity.Role, node, addr string) (*http.Client, string) {
	if pc.tls == nil {
		return pc.plain, api.URL(addr, false)
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	k := peerKey{role, node}
	c, ok := pc.clients[k]
	if !ok {
		c = api.NewHTTPClient(pc.tls.ClientConfig(tlsconfig.WantNode(role, node)))
		pc.clients[k] = c
	}
	return c, api.URL(addr, true)
}

// CloseIdle closes every client's idle connections.
func (pc *Peers) CloseIdle() {
	if pc.plain != nil {
		pc.plain.CloseIdleConnections()
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, c := range pc.clients {
		c.CloseIdleConnections()
	}
}

// GetAgent returns the client for any member in role at addr (an address
// the operator configured, with no node name to expect), and its base URL.
func (pc *Peers) GetAgent(role identity.Role, addr string) (*http.Client, string) {
	if pc.tls == nil {
		return pc.plain, api.URL(addr, false)
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	k := peerKey{role, "@" + addr}
	c, ok := pc.clients[k]
	if !ok {
		c = api.NewHTTPClient(pc.tls.ClientConfig(tlsconfig.WantAgent(role)))
		pc.clients[k] = c
	}
	return c, api.URL(addr, true)
}
