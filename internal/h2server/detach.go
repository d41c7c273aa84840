package h2server

import (
	"errors"
	"net/http"
	"os"
)

// ErrNotDetachable is returned by Detach for a response it cannot
// detach: not one of this server's HTTP/2 responses, one whose headers
// have not been sent, or one whose handler has finished.
var ErrNotDetachable = errors.New("h2server: only a running HTTP/2 response of this server whose headers were sent can be detached")

// Detached is a response stream whose handler has returned while the
// stream stays open. It holds no goroutine. Its owner writes to it by
// kicking it (Kick): the connection's goroutine then calls the stream's
// next function, writes what it returns, and calls next again once that
// is written, until next returns nothing; a kick while a write is in
// progress waits for that write. The stream ends when next says so, when
// its owner resets it, or when the peer or the connection ends it;
// onClose is called once in every case.
//
// next and onClose run on the connection's goroutine: they must return
// quickly, must not block, and must not call Kick or Reset (which hand
// work to that goroutine and would wait for it). The bytes next returns
// must not be modified afterwards; the server keeps a reference until
// they are written or the stream closes, and copies nothing.
//
// Writes are DATA frames of the stream, under the peer's flow control,
// the connection's write scheduler and its limits, as a handler's are.
// Nothing bounds how long a write may wait for a peer that does not
// read: the owner resets such a stream (it knows when it handed the
// bytes out).
type Detached struct {
	sc      *serverConn
	st      *stream
	next    func() Write
	onClose func(error)

	// Owned by the connection's goroutine:
	writing bool // a write is queued and not yet written
	ended   bool // the end or a reset was queued: next is not called again
}

// Write is what a detached stream's next function returns: Data to write
// (none when empty), and whether the stream then ends. An ending stream
// sends Trailers, when it has fields, in a HEADERS frame with END_STREAM,
// else END_STREAM on the last DATA frame.
type Write struct {
	Data     []byte
	End      bool
	Trailers http.Header
}

// Detach detaches the response w from its handler, which must call it
// on its own goroutine after the response headers were sent (a Flush
// sends them) and then return: writes the handler (or a library around
// it) makes afterwards are discarded, and the handler's return does not
// end the stream. It returns ErrNotDetachable, or the stream's error
// when the stream or its connection has already closed.
func Detach(w http.ResponseWriter, next func() Write, onClose func(error)) (*Detached, error) {
	rw, ok := w.(*responseWriter)
	if !ok || rw.rws == nil || rw.rws.handlerDone || rw.rws.detached {
		return nil, ErrNotDetachable
	}
	rws := rw.rws
	if rws.bw.Buffered() > 0 {
		if err := rws.bw.Flush(); err != nil {
			return nil, err
		}
	}
	if !rws.sentHeader {
		return nil, ErrNotDetachable
	}
	d := &Detached{sc: rws.conn, st: rws.stream, next: next, onClose: onClose}
	attached := make(chan error, 1)
	attach := func(sc *serverConn) {
		st := d.st
		if st.state == stateClosed || sc.streams[st.id] != st {
			err := st.closeErr
			if err == nil {
				err = errStreamClosed
			}
			attached <- err
			return
		}
		st.detached = d
		attached <- nil
	}
	// The serve goroutine runs a message as it takes it, but serveMsgCh
	// is buffered: a message sent as the connection ends may never be
	// taken. attach answers before the serve goroutine can end, so once
	// doneServing is closed an answer is there or never comes.
	select {
	case d.sc.serveMsgCh <- attach:
	case <-d.sc.doneServing:
		return nil, errClientDisconnected
	}
	var err error
	select {
	case err = <-attached:
	case <-d.sc.doneServing:
		select {
		case err = <-attached:
		default:
			return nil, errClientDisconnected
		}
	}
	if err != nil {
		return nil, err
	}
	rws.detached = true
	return d, nil
}

// Conn identifies the connection the stream is on: Kick hands the
// streams of one connection over in one message.
func (d *Detached) Conn() any { return d.sc }

// StreamID is the stream's HTTP/2 identifier, unique on its connection.
func (d *Detached) StreamID() uint32 { return d.st.id }

// Kick has the connection's goroutine pull from each stream's next
// function, unless the stream is writing (it pulls again when the write
// completes) or has ended. It hands each run of consecutive streams on
// one connection over in one message, waiting for each connection's
// goroutine to take its message, or for the connection to close.
func Kick(ds []*Detached) {
	for len(ds) > 0 {
		sc := ds[0].sc
		n := 1
		for n < len(ds) && ds[n].sc == sc {
			n++
		}
		run := ds[:n:n]
		ds = ds[n:]
		sc.sendServeMsg(func(sc *serverConn) {
			for _, d := range run {
				d.pull()
			}
		})
	}
}

// Reset ends the stream at once with RST_STREAM and code, dropping what
// it has not written; the peer sees a stream error. Use it for a peer
// that stopped reading.
func (d *Detached) Reset(code ErrCode) {
	d.sc.sendServeMsg(func(sc *serverConn) {
		if d.ended || d.st.detached != d {
			return
		}
		d.ended = true
		sc.resetStream(StreamError{StreamID: d.st.id, Code: code, Cause: os.ErrDeadlineExceeded})
	})
}

// pull writes what next returns, on the connection's goroutine.
func (d *Detached) pull() {
	st := d.st
	if d.writing || d.ended || st.detached != d {
		return
	}
	w := d.next()
	if w.End {
		d.ended = true
		if len(w.Trailers) == 0 {
			d.sc.writeFrame(FrameWriteRequest{write: &writeData{streamID: st.id, p: w.Data, endStream: true}, stream: st})
			return
		}
		if len(w.Data) > 0 {
			d.sc.writeFrame(FrameWriteRequest{write: &writeData{streamID: st.id, p: w.Data}, stream: st})
		}
		d.sc.writeFrame(FrameWriteRequest{write: &writeResHeaders{streamID: st.id, h: w.Trailers, endStream: true}, stream: st})
		return
	}
	if len(w.Data) == 0 {
		return
	}
	d.writing = true
	d.sc.writeFrame(FrameWriteRequest{write: &writeData{streamID: st.id, p: w.Data, detachedLast: true}, stream: st})
}

// wrote is called on the connection's goroutine when the last frame of
// a write was written.
func (d *Detached) wrote() {
	d.writing = false
	d.pull()
}

// close is called on the connection's goroutine when the stream closes.
func (d *Detached) close(err error) {
	d.ended = true
	if d.onClose != nil {
		d.onClose(err)
	}
}
