package batchconn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/slicerd/slicerd/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingConn counts the inner connection's Write calls.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestOrderOverTCP writes records from several goroutines through a
// Listener over loopback TCP: every record arrives whole, each
// goroutine's in order, and the peer reads to EOF after Close.
func TestOrderOverTCP(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &Listener{Listener: inner, MaxPending: 512}
	defer ln.Close()
	const writers, records = 8, 2000
	got := make(chan error, 1)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		next := make([]int, writers)
		sc := bufio.NewScanner(c)
		n := 0
		for sc.Scan() {
			var w, i int
			var pad string
			if _, err := fmt.Sscanf(sc.Text(), "%d %d %s", &w, &i, &pad); err != nil || w >= writers || i != next[w] || len(pad) != i%300+1 {
				got <- fmt.Errorf("record %d: %q out of order or torn (want writer %d's record %d)", n, sc.Text(), w, next[min(w, writers-1)])
				return
			}
			next[w]++
			n++
		}
		if n != writers*records {
			got <- fmt.Errorf("read %d records before EOF, want %d (%v)", n, writers*records, sc.Err())
			return
		}
		got <- nil
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range records {
				rec := strconv.Itoa(w) + " " + strconv.Itoa(i) + " " + strings.Repeat("x", i%300+1) + "\n"
				if _, err := c.Write([]byte(rec)); err != nil {
					t.Errorf("writer %d record %d: %v", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// TestCoalesces holds the first inner write until the peer reads (a pipe
// has no buffer): the writes made meanwhile go out in one more call, not
// in 99.
func TestCoalesces(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	inner := &countingConn{Conn: a}
	c := New(inner, 1<<20, 0)
	for i := range 100 {
		if n, err := c.Write([]byte{byte(i)}); n != 1 || err != nil {
			t.Fatalf("Write %d: %d, %v", i, n, err)
		}
	}
	buf := make([]byte, 100)
	if _, err := io.ReadFull(b, buf); err != nil {
		t.Fatal(err)
	}
	for i, v := range buf {
		if v != byte(i) {
			t.Fatalf("byte %d is %d", i, v)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	if _, err := b.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("peer read after Close: %v, want EOF", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	// The flusher started on the first byte, or on more if the writes
	// ran first; what was buffered while its write waited for the reader
	// went out in one more.
	if n := inner.writes.Load(); n > 2 {
		t.Fatalf("inner writes: %d, want at most 2", n)
	}
}

// TestWriteWaitsForRoom: a peer that does not read leaves a Write past
// the bound waiting until its deadline; what it did not write never
// arrives, and what was accepted does.
func TestWriteWaitsForRoom(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := New(a, 8, 0)
	if _, err := c.Write([]byte("1234")); err != nil { // the flusher takes these and blocks
		t.Fatal(err)
	}
	// Once the flusher holds them (blocked on the pipe), so that what is
	// buffered next does not depend on when it woke.
	testwait.For(t, "the flusher to take the first write", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pending == nil
	})
	if _, err := c.Write([]byte("5678")); err != nil { // buffered
		t.Fatal(err)
	}
	c.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Write([]byte("90123")) // 4 + 5 bytes: past the bound of 8
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Write past the bound: %v, want a timeout", err)
	}
	c.SetWriteDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		got, err := io.ReadAll(b)
		if err == nil && string(got) != "12345678" {
			err = fmt.Errorf("peer read %q, want 12345678", got)
		}
		done <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCloseLingerBounded: Close returns when the peer never reads, after
// the linger time, and closes the connection.
func TestCloseLingerBounded(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := New(a, 0, 10*time.Millisecond)
	if _, err := c.Write([]byte("never read")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("peer read after Close: %v, want EOF", err)
	}
}

// TestWriteErrorSticky: once the inner connection fails, Writes return
// its error.
func TestWriteErrorSticky(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	c := New(a, 16, 0)
	defer c.Close()
	// The first Write is accepted; the second would pass the bound, so it
	// waits for the first's batch, which fails.
	if _, err := c.Write(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, 10)); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("second Write: %v, want the pipe's error", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("third Write: %v, want the pipe's error", err)
	}
}

// TestLargeWrite: a Write larger than the bound goes through whole.
func TestLargeWrite(t *testing.T) {
	a, b := net.Pipe()
	c := New(a, 16, 0)
	big := []byte(strings.Repeat("0123456789", 1000))
	done := make(chan error, 1)
	go func() {
		got, err := io.ReadAll(b)
		if err == nil && string(got) != "ab"+string(big) {
			err = fmt.Errorf("peer read %d bytes, want %d", len(got), len(big)+2)
		}
		done <- err
	}()
	for _, p := range [][]byte{[]byte("ab"), big} {
		if n, err := c.Write(p); n != len(p) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSmallWrites writes 160-byte frames to a loopback TCP peer
// that discards them, directly and through a Conn.
func BenchmarkSmallWrites(b *testing.B) {
	for _, batched := range []bool{false, true} {
		b.Run(fmt.Sprintf("batched=%v", batched), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			read := make(chan int64, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					read <- 0
					return
				}
				n, _ := io.Copy(io.Discard, c)
				c.Close()
				read <- n
			}()
			raw, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			var c net.Conn = raw
			if batched {
				c = New(raw, 0, 0)
			}
			frame := make([]byte, 160)
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(frame); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			if n := <-read; n != int64(b.N*len(frame)) {
				b.Fatalf("peer read %d bytes, want %d", n, b.N*len(frame))
			}
		})
	}
}
