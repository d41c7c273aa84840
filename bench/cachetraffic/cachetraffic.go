// Package cachetraffic drives the kvcache example as an application would
// use a cache in front of a database: Zipf-distributed reads at a steady
// rate, each miss refilled with a write, and it counts, per second, the
// reads, the hits and the requests that failed. Harnesses and end-to-end
// tests use it to measure the hit rate while tasks restart or drain.
package cachetraffic

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/slicerd/slicerd/examples/kvcache"
)

// Config is the traffic.
type Config struct {
	Keys     int     // distinct keys
	Exponent float64 // Zipf exponent s (> 1)
	Rate     float64 // reads per second offered
	Workers  int     // most reads in flight
	Seed     uint64
}

// DefaultConfig is 10,000 keys, s = 1.1, 2,000 reads a second.
func DefaultConfig() Config {
	return Config{Keys: 10_000, Exponent: 1.1, Rate: 2000, Workers: 32, Seed: 1}
}

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	switch {
	case c.Keys < 1 || c.Keys > 10_000_000:
		return fmt.Errorf("-keys %d: use 1 to 10,000,000", c.Keys)
	case !(c.Exponent > 1) || c.Exponent > 10:
		return fmt.Errorf("-exponent %g: use above 1, at most 10", c.Exponent)
	case !(c.Rate > 0) || c.Rate > 1e6:
		return fmt.Errorf("-rate %g: use above 0, at most 1,000,000", c.Rate)
	case c.Workers < 1 || c.Workers > 10_000:
		return fmt.Errorf("-workers %d: use 1 to 10,000", c.Workers)
	}
	return nil
}

// Second is what one second of traffic saw.
type Second struct {
	At      time.Time `json:"at"`
	Reads   int       `json:"reads"`
	Hits    int       `json:"hits"`
	Failed  int       `json:"failed"`
	Dropped int       `json:"dropped"` // reads not started: every worker was busy
	// Partial marks the last second, cut short when Run ended: its reads
	// count, but a handful of them make no hit rate.
	Partial bool `json:"partial,omitempty"`
}

// HitRate is Hits/Reads, 1 without reads.
func (s Second) HitRate() float64 {
	if s.Reads == 0 {
		return 1
	}
	return float64(s.Hits) / float64(s.Reads)
}

// Driver offers the traffic through a kvcache client.
type Driver struct {
	cfg    Config
	client *kvcache.Client

	mu      sync.Mutex
	cur     Second
	seconds []Second
	errs    []error // the first few failures
}

// New returns a driver of cfg through client.
func New(cfg Config, client *kvcache.Client) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Driver{cfg: cfg, client: client}, nil
}

// Run offers the traffic until ctx ends.
func (d *Driver) Run(ctx context.Context) {
	rng := rand.New(rand.NewPCG(d.cfg.Seed, d.cfg.Seed+1))
	zipf := rand.NewZipf(rng, d.cfg.Exponent, 1, uint64(d.cfg.Keys-1))
	keys := make(chan string)
	var wg sync.WaitGroup
	for range d.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				d.read(ctx, k)
			}
		}()
	}
	defer func() { close(keys); wg.Wait(); d.roll(time.Now(), true) }()
	interval := time.Duration(float64(time.Second) / d.cfg.Rate)
	next := time.Now()
	d.mu.Lock()
	d.cur = Second{At: next.Truncate(time.Second)}
	d.mu.Unlock()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.roll(now, false)
			// Catch up on the reads due by now, dropping what no worker
			// takes at once: the offered rate stays the same.
			for ; !next.After(now); next = next.Add(interval) {
				k := fmt.Sprintf("key-%d", zipf.Uint64())
				select {
				case keys <- k:
				default:
					d.count(func(s *Second) { s.Dropped++ })
				}
			}
			t.Reset(time.Until(next))
		}
	}
}

// read reads k and refills it on a miss.
func (d *Driver) read(ctx context.Context, k string) {
	_, found, err := d.client.Get(ctx, k)
	if err == nil && !found {
		err = d.client.Put(ctx, k, []byte("value of "+k))
	}
	if ctx.Err() != nil {
		return
	}
	d.count(func(s *Second) {
		s.Reads++
		switch {
		case err != nil:
			s.Failed++
		case found:
			s.Hits++
		}
	})
	if err != nil {
		d.mu.Lock()
		if len(d.errs) < 5 {
			d.errs = append(d.errs, err)
		}
		d.mu.Unlock()
	}
}

func (d *Driver) count(f func(*Second)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(&d.cur)
}

// roll closes the current second when now is past it (or when final).
func (d *Driver) roll(now time.Time, final bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for final || now.Sub(d.cur.At) >= time.Second {
		if final && now.Sub(d.cur.At) < time.Second {
			d.cur.Partial = true
		}
		d.seconds = append(d.seconds, d.cur)
		if final {
			return
		}
		d.cur = Second{At: d.cur.At.Add(time.Second)}
	}
}

// Seconds returns the closed seconds since from.
func (d *Driver) Seconds(from time.Time) []Second {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Second
	for _, s := range d.seconds {
		if !s.At.Before(from.Truncate(time.Second)) {
			out = append(out, s)
		}
	}
	return out
}

// Errors returns the first few failures, joined.
func (d *Driver) Errors() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return errors.Join(d.errs...)
}

// Summary is the traffic over some seconds.
type Summary struct {
	Seconds     int     `json:"seconds"`
	Reads       int     `json:"reads"`
	Hits        int     `json:"hits"`
	Failed      int     `json:"failed"`
	Dropped     int     `json:"dropped"`
	HitRate     float64 `json:"hit_rate"`
	MinHitRate  float64 `json:"min_hit_rate"` // over the whole one-second windows
	MinHitAtSec int     `json:"min_hit_at_s"` // which second, from the first
}

// Summarize adds up ss.
func Summarize(ss []Second) Summary {
	sum := Summary{Seconds: len(ss), MinHitRate: 1}
	for i, s := range ss {
		sum.Reads += s.Reads
		sum.Hits += s.Hits
		sum.Failed += s.Failed
		sum.Dropped += s.Dropped
		if r := s.HitRate(); r < sum.MinHitRate && !s.Partial {
			sum.MinHitRate, sum.MinHitAtSec = r, i
		}
	}
	sum.HitRate = Second{Reads: sum.Reads, Hits: sum.Hits}.HitRate()
	return sum
}
