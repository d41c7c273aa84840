// Package testnet holds network helpers for slicerd's tests.
package testnet

import (
	"net"
	"testing"
)

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
