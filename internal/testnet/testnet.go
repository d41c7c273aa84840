// Package testnet holds network helpers for slicerd's tests.
package testnet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FreeAddr returns a loopback address whose port nothing listened on a
// moment ago: for a server whose address must be known before it starts
// (an etcd member, a node restarted on the address it had), or a dead one
// to dial. Another process may take the port meanwhile; tests bear that.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testnet: find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// DialFrom connects to addr over TCP from the local address from (any when
// empty), such as 127.0.0.2 for a second client host on loopback, and
// closes the connection when the test ends.
func DialFrom(t testing.TB, addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %q: %v", addr, from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// StalledStream starts, on a fresh cleartext HTTP/2 connection c, one gRPC
// call of path with the request message body (protobuf bytes), announcing
// a flow-control window of 0 for the server's streams: the server can send
// the response headers but no response data until the client grants
// window, which it never does. It is a subscriber that never reads. authority
// is the Host the call names; extra are more request headers, name and
// value in turn, such as "grpc-accept-encoding", "gzip".
func StalledStream(c net.Conn, authority, path string, body []byte, extra ...string) error {
	return StalledStreamAfter(c, 0, authority, path, body, extra...)
}

// StalledStreamAfter is StalledStream with a flow-control window of
// window bytes: the server can send that much response data, and no more.
func StalledStreamAfter(c net.Conn, window uint32, authority, path string, body []byte, extra ...string) error {
	fr := http2.NewFramer(c, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return err
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		return err
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", authority}, {":path", path},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		fields = append(fields, [2]string{extra[i], extra[i+1]})
	}
	for _, f := range fields {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return err
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	msg := make([]byte, 5+len(body)) // gRPC envelope: uncompressed, 4-byte length
	binary.BigEndian.PutUint32(msg[1:5], uint32(len(body)))
	copy(msg[5:], body)
	return fr.WriteData(1, true, msg)
}

// ResetCode reads frames from a connection StalledStream started until the
// server resets its stream, and returns the reset's error code. It returns
// an error if the connection ends, or its read deadline passes, first.
func ResetCode(c net.Conn) (http2.ErrCode, error) {
	fr := http2.NewFramer(io.Discard, c)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, err
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			return f.ErrCode, nil
		case *http2.GoAwayFrame:
			return 0, fmt.Errorf("connection closed by the server: GOAWAY %v", f.ErrCode)
		}
	}
}

// Hanging listens on host and holds every connection without a
// word, as a server that hangs the TLS handshake or never speaks HTTP/2. It
// returns its address; a host it cannot listen on skips the test.
func Hanging(t testing.TB, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", host, err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
