package main

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slicerd/slicerd/bench/internal/benchtest"
)

func TestRejectsBadFlags(t *testing.T) {
	benchtest.Refuses(t, run, []benchtest.Refused{
		{Args: []string{"-tasks", "1"}, Want: "-tasks 1"},
		{Args: []string{"-shifts", "-1"}, Want: "-shifts -1"},
		{Args: []string{"-period", "3s"}, Want: "not longer than"},
		{Args: []string{"-steady", "0s"}, Want: "-steady 0s"},
		{Args: []string{"-load-window", "0s"}, Want: "-load-window 0s"},
		{Args: []string{"-rate", "0"}, Want: "rate"},
		{Args: []string{"extra"}, Want: "unexpected argument"},
		{Args: []string{"-nope"}, Want: "flag provided but not defined"},
	})
}

func TestPhaseBetweenReadings(t *testing.T) {
	t0 := time.Unix(100, 0)
	from := counters{at: t0, requests: 1000, misrouted: 2, refused: 2, failed: 1, generation: 4}
	to := counters{at: t0.Add(10 * time.Second), requests: 21000, misrouted: 6, refused: 7, failed: 1, dropped: 3, generation: 6}
	p := between("shift 1", from, to)
	if p.Seconds != 10 || p.Requests != 20000 || p.Misrouted != 4 || p.Refused != 5 || p.Failed != 0 || p.Dropped != 3 ||
		p.GenerationBefore != 4 || p.GenerationAfter != 6 {
		t.Errorf("phase %+v", p)
	}
	if p.Correct != 1-4.0/20000 {
		t.Errorf("correctly routed %v, want %v", p.Correct, 1-4.0/20000)
	}
	if q := between("idle", to, to); q.Correct != 0 || q.Requests != 0 {
		t.Errorf("a phase without requests: %+v", q)
	}
}

func TestGatherReadsTheClerksHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "slicerd_clerk_assignment_delay_seconds", Buckets: []float64{0.01, 0.1, 1},
		ConstLabels: prometheus.Labels{"job": "kv"}})
	reg.MustRegister(h)
	for _, v := range []float64{0.005, 0.05, 0.05, 0.5, 5} {
		h.Observe(v)
	}
	ss, err := gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	got := ss.Histogram("slicerd_clerk_assignment_delay_seconds", "job", "kv")
	if got.Count != 5 || len(got.Bounds) != 4 || got.Counts[0] != 1 || got.Counts[1] != 3 || got.Counts[3] != 5 || got.Within(1) != 0.8 {
		t.Errorf("histogram %+v", got)
	}
	p := between("x", counters{}, counters{delay: got})
	if p.Installs != 5 || p.InstallP99Ms != 1000 {
		t.Errorf("installs %v, p99 %v ms; want 5 and 1000 (the highest finite bound)", p.Installs, p.InstallP99Ms)
	}
}
