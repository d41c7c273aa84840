package gossip

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// The sealed transport encrypts gossip below memberlist, in memberlist's
// own wire format (encryption version 1: AES-GCM with a random 12-byte
// nonce, no padding, no label), so members that encrypt with memberlist's
// keyring and members on a sealed transport understand each other.
// Memberlist itself, and serf above it, then run without a keyring: serf's
// keyring queries, which anyone holding the gossip key can send, find no
// keyring to list or change. The keys change only through the Node's key
// methods, which slicerd's agents call when an admin asks over their
// authenticated API.
const (
	sealVersion  = 1  // memberlist's encryption version 1
	sealNonce    = 12 // AES-GCM's standard nonce
	sealOverhead = 1 + sealNonce + 16
	// sealStreamMsg is memberlist's encryptMsg message type: the first
	// byte of every encrypted stream message.
	sealStreamMsg = 10
	// maxSealedStream is the largest stream message accepted, memberlist's
	// own limit on a push/pull (maxPushStateBytes).
	maxSealedStream = 20 << 20
)

// errUnsealed reports a packet or stream that no installed key opens.
var errUnsealed = errors.New("gossip: no installed key opens the message")

// seal appends to dst the sealed form of msg under key, with ad as
// additional authenticated data.
func seal(dst []byte, key, msg, ad []byte) ([]byte, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	start := len(dst)
	dst = append(dst, sealVersion)
	dst = append(dst, make([]byte, sealNonce)...)
	nonce := dst[start+1 : start+1+sealNonce]
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return gcm.Seal(dst, nonce, msg, ad), nil
}

// unseal opens a sealed message with the first of keys that works.
func unseal(keys [][]byte, sealed, ad []byte) ([]byte, error) {
	if len(sealed) < sealOverhead || sealed[0] != sealVersion {
		return nil, errUnsealed
	}
	nonce, ct := sealed[1:1+sealNonce], sealed[1+sealNonce:]
	for _, key := range keys {
		block, err := aes.NewCipher(key)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		if plain, err := gcm.Open(nil, nonce, ct, ad); err == nil {
			return plain, nil
		}
	}
	return nil, errUnsealed
}

// sealedTransport encrypts what memberlist sends and decrypts what it
// receives with the keys of ring: packets are sealed whole; a stream is
// sealed one Write at a time, which memberlist makes one per message. It
// owns two goroutines, started by newSealedTransport and stopped by
// Shutdown, that carry received packets and streams to memberlist.
type sealedTransport struct {
	inner   memberlist.NodeAwareTransport
	ring    *memberlist.Keyring
	refused func(what string, from net.Addr, err error) // a message no key opened

	packets chan *memberlist.Packet
	streams chan net.Conn

	closing     chan struct{} // closed when Shutdown begins
	stop        chan struct{} // closed once the inner transport is down
	wg          sync.WaitGroup
	stopOnce    sync.Once
	shutdownErr error
}

// newSealedTransport wraps inner; refused is called, from the transport's
// goroutines or memberlist's, for every packet or stream that no key of
// ring opens.
func newSealedTransport(inner memberlist.NodeAwareTransport, ring *memberlist.Keyring, refused func(what string, from net.Addr, err error)) *sealedTransport {
	t := &sealedTransport{
		inner:   inner,
		ring:    ring,
		refused: refused,
		packets: make(chan *memberlist.Packet),
		streams: make(chan net.Conn),
		closing: make(chan struct{}),
		stop:    make(chan struct{}),
	}
	t.wg.Go(t.openPackets)
	t.wg.Go(t.acceptStreams)
	return t
}

// openPackets decrypts received packets; those no key opens are dropped.
func (t *sealedTransport) openPackets() {
	in := t.inner.PacketCh()
	for {
		var p *memberlist.Packet
		select {
		case p = <-in:
		case <-t.stop:
			return
		}
		plain, err := unseal(t.ring.GetKeys(), p.Buf, nil)
		if err != nil {
			t.refused("packet", p.From, err)
			continue
		}
		p.Buf = plain
		select {
		case t.packets <- p:
		case <-t.closing: // dropped: nobody may read it any more
		}
	}
}

// acceptStreams wraps accepted streams; each is decrypted as memberlist
// reads it.
func (t *sealedTransport) acceptStreams() {
	in := t.inner.StreamCh()
	for {
		var c net.Conn
		select {
		case c = <-in:
		case <-t.stop:
			return
		}
		select {
		case t.streams <- t.wrap(c):
		case <-t.closing:
			_ = c.Close()
		}
	}
}

func (t *sealedTransport) wrap(c net.Conn) net.Conn {
	return &sealedConn{Conn: c, t: t, r: bufio.NewReader(c)}
}

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *sealedTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

// WriteTo implements memberlist.Transport.
func (t *sealedTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *sealedTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	sealed, err := seal(make([]byte, 0, len(b)+sealOverhead), t.ring.GetPrimaryKey(), b, nil)
	if err != nil {
		return time.Time{}, fmt.Errorf("gossip: seal packet: %w", err)
	}
	return t.inner.WriteToAddress(sealed, addr)
}

// PacketCh implements memberlist.Transport.
func (t *sealedTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// StreamCh implements memberlist.Transport.
func (t *sealedTransport) StreamCh() <-chan net.Conn { return t.streams }

// DialTimeout implements memberlist.Transport.
func (t *sealedTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *sealedTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := t.inner.DialAddressTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return t.wrap(c), nil
}

// Shutdown implements memberlist.Transport: it shuts the inner transport
// down, then stops the transport's goroutines. The inner transport's
// listeners may be waiting to hand over a packet or stream until they see
// the shutdown, so the goroutines go on taking them until it is done,
// dropping what they cannot pass on at once.
func (t *sealedTransport) Shutdown() error {
	t.stopOnce.Do(func() {
		close(t.closing)
		t.shutdownErr = t.inner.Shutdown()
		close(t.stop)
		t.wg.Wait()
	})
	return t.shutdownErr
}

// sealedConn is a stream whose every Write is one sealed message and
// whose reads open them in turn. memberlist reads and writes a stream
// from one goroutine at a time.
type sealedConn struct {
	net.Conn
	t       *sealedTransport
	r       *bufio.Reader
	plain   []byte // opened and not yet read
	failed  bool   // refused once; later reads return readErr
	readErr error
}

// Write seals b as one message: [10][length][version, nonce, sealed],
// authenticated with its five header bytes, as memberlist does.
func (c *sealedConn) Write(b []byte) (int, error) {
	if len(b) > maxSealedStream-sealOverhead {
		return 0, fmt.Errorf("gossip: stream message of %d bytes is over the %d-byte limit", len(b), maxSealedStream)
	}
	var ad [5]byte
	ad[0] = sealStreamMsg
	binary.BigEndian.PutUint32(ad[1:], uint32(len(b)+sealOverhead))
	msg, err := seal(append(make([]byte, 0, 5+len(b)+sealOverhead), ad[:]...), c.t.ring.GetPrimaryKey(), b, ad[:])
	if err != nil {
		return 0, fmt.Errorf("gossip: seal stream: %w", err)
	}
	if _, err := c.Conn.Write(msg); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Read returns the opened bytes of the stream's messages, never more than
// one message's in a call.
func (c *sealedConn) Read(b []byte) (int, error) {
	if len(c.plain) == 0 {
		if c.readErr != nil {
			return 0, c.readErr
		}
		if err := c.next(); err != nil {
			c.readErr = err
			return 0, err
		}
	}
	n := copy(b, c.plain)
	c.plain = c.plain[n:]
	return n, nil
}

// next reads and opens the stream's next message.
func (c *sealedConn) next() error {
	var hdr [5]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(hdr[1:])
	if hdr[0] != sealStreamMsg || size < sealOverhead || size > maxSealedStream {
		return c.refuse(fmt.Errorf("gossip: stream from %s is not sealed with a gossip key (type %d, %d bytes); its sender has no key or runs without encryption", c.RemoteAddr(), hdr[0], size))
	}
	sealed := make([]byte, size)
	if _, err := io.ReadFull(c.r, sealed); err != nil {
		return err
	}
	plain, err := unseal(c.t.ring.GetKeys(), sealed, hdr[:])
	if err != nil {
		return c.refuse(err)
	}
	if len(plain) == 0 {
		return c.refuse(errors.New("gossip: empty sealed stream message"))
	}
	c.plain = plain
	return nil
}

func (c *sealedConn) refuse(err error) error {
	if !c.failed {
		c.failed = true
		c.t.refused("stream", c.RemoteAddr(), err)
	}
	return err
}
