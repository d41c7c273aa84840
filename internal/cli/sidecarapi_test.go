package cli

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The local API's socket is the sidecar's user's: created mode 0600, a
// stale socket replaced, one another process serves and any other file
// refused, a connection from this user accepted with its credentials
// read, and at close the socket removed only if it is still its own.
func TestListenLocal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.sock")
	for range 2 { // the second time over the socket the first one left
		ln, err := listenLocal(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("socket mode %v, %v; want 0600", fi.Mode(), err)
		}
		accepted := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.Close()
			}
			accepted <- err
		}()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		if uid, err := peerUID(c.(*net.UnixConn)); err != nil || uid != os.Getuid() {
			t.Errorf("peer credentials = %d, %v; want uid %d", uid, err, os.Getuid())
		}
		if err := <-accepted; err != nil {
			t.Fatalf("a connection of the sidecar's own user was refused: %v", err)
		}
		c.Close()
		// A second sidecar on the same socket is refused while this one
		// serves: the socket is not taken over.
		if _, err := listenLocal(path); err == nil || !strings.Contains(err.Error(), "served by another process") {
			t.Fatalf("listenLocal over a socket another listener serves = %v; want it refused", err)
		}
		// Closing leaves the socket at its path when that is no longer
		// this listener's (another listener's since).
		if err := os.Rename(path, path+".old"); err != nil {
			t.Fatal(err)
		}
		other, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("closing removed the socket another listener created at its path: %v", err)
		}
		other.Close() // which removes its socket
		// The first socket back at the path, stale, for the next round.
		if err := os.Rename(path+".old", path); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := listenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("closing left its own socket: %v", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenLocal(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("listenLocal over a regular file = %v; want it refused", err)
	}
}

// The local API holds at most localMaxConns connections: one more is
// closed at once, and a place frees when the server closes one.
func TestLocalAPIConnectionCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api.sock")
	raw, err := listenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	ln := limitLocal(raw, nil)
	defer ln.Close()
	accepted := make(chan net.Conn, localMaxConns+1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	var clients, served []net.Conn
	defer func() {
		for _, c := range append(clients, served...) {
			c.Close()
		}
	}()
	for range localMaxConns {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		served = append(served, <-accepted)
	}
	extra, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	// Closed by the server at once: the read ends with EOF. A connection
	// the cap let in would stay open, and the read would time out.
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection %d over the cap was not closed (read %d bytes, %v)", localMaxConns+1, n, err)
	}
	served[0].Close() // as the server does when its client hangs up
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	clients = append(clients, c)
	select {
	case c := <-accepted:
		served = append(served, c)
	case <-time.After(10 * time.Second):
		t.Fatal("no place freed by a closed connection")
	}
}
