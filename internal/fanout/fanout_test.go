package fanout

import "testing"

func pending(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestNotifyCoalesces(t *testing.T) {
	var s Signal
	a, stopA := s.Subscribe()
	b, stopB := s.Subscribe()
	defer stopB()
	s.Notify()
	s.Notify()
	if !pending(a) || !pending(b) {
		t.Fatal("a notified subscription holds no signal")
	}
	if pending(a) || pending(b) {
		t.Fatal("two notifications left two signals; want them coalesced into one")
	}
	stopA()
	stopA() // safe twice
	s.Notify()
	if pending(a) {
		t.Fatal("an unsubscribed channel received a signal")
	}
	if !pending(b) {
		t.Fatal("a remaining subscription missed a signal after another unsubscribed")
	}
}

func TestNotifyWithoutSubscribers(t *testing.T) {
	var s Signal
	s.Notify() // must not block or panic
	ch, stop := s.Subscribe()
	defer stop()
	if pending(ch) {
		t.Fatal("a new subscription holds a signal sent before it subscribed")
	}
}
