package api

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// NewH2CClient returns an HTTP client that speaks HTTP/2 over cleartext TCP
// with prior knowledge, as slicerd's RPC port does by default. Streams are
// long-lived, so it sets no overall timeout; TCP keep-alives and HTTP/2
// pings detect dead peers.
func NewH2CClient() *http.Client { return NewHTTPClient(nil) }

// NewHTTPClient returns an HTTP/2 client for slicerd's RPC port: over TLS
// with tlsConf (see package tlsconfig for one that verifies slicerd
// identities), or cleartext with prior knowledge when tlsConf is nil. Use
// it with URL(addr, tlsConf != nil).
func NewHTTPClient(tlsConf *tls.Config) *http.Client {
	protocols := new(http.Protocols)
	if tlsConf == nil {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
	}
	return &http.Client{Transport: &http.Transport{
		Protocols:       protocols,
		TLSClientConfig: tlsConf,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 15 * time.Second,
		}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 10 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}}
}

// RPCURL turns a host:port into the base URL cleartext Connect clients use.
func RPCURL(addr string) string { return "http://" + addr }

// URL turns a host:port into the base URL Connect clients use: https when
// secure, http otherwise.
func URL(addr string, secure bool) string {
	if secure {
		return "https://" + addr
	}
	return "http://" + addr
}
