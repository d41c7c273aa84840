package api

import (
	"net"
	"net/http"
	"time"
)

// NewH2CClient returns an HTTP client that speaks HTTP/2 over cleartext TCP
// with prior knowledge, as slicerd's RPC port does by default. Streams are
// long-lived, so it sets no overall timeout; TCP keep-alives and HTTP/2
// pings detect dead peers.
func NewH2CClient() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols: protocols,
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 15 * time.Second,
		}).DialContext,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 10 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}}
}

// RPCURL turns a host:port into the base URL Connect clients use.
func RPCURL(addr string) string { return "http://" + addr }
