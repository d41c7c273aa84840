package gossip

import (
	"fmt"
	"net"
	"testing"

	"github.com/hashicorp/memberlist"
)

// BenchmarkSealPacket seals and opens one gossip packet (memberlist's
// UDP packets stay under 1,400 bytes), with the sealing key first in the
// ring or, as during a rotation, last of three.
func BenchmarkSealPacket(b *testing.B) {
	keys := [][]byte{make([]byte, 32), make([]byte, 32), make([]byte, 32)}
	for i := range keys {
		keys[i][0] = byte(i + 1)
	}
	msg := make([]byte, 1400)
	for _, tc := range []struct {
		name string
		ring [][]byte
	}{{"keys=1", keys[:1]}, {"keys=3,last", [][]byte{keys[1], keys[2], keys[0]}}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				sealed, err := seal(nil, keys[0], msg, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := unseal(tc.ring, sealed, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSealedStream writes and reads one stream message of a
// push-pull's size through a sealed connection.
func BenchmarkSealedStream(b *testing.B) {
	key := make([]byte, 32)
	ring, err := memberlist.NewKeyring([][]byte{key}, key)
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{4 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			tr := &sealedTransport{ring: ring, refused: func(string, net.Addr, error) { b.Error("refused") }}
			client, server := net.Pipe()
			defer client.Close()
			defer server.Close()
			w, r := tr.wrap(client), tr.wrap(server)
			msg := make([]byte, size)
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				errc := make(chan error, 1)
				go func() { _, err := w.Write(msg); errc <- err }()
				for got := 0; got < size; {
					n, err := r.Read(buf[got:])
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
