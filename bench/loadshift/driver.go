package loadshift

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/clerk"
)

// Config describes the offered load. Start from DefaultConfig.
type Config struct {
	// Keys is the number of distinct keys, named key-000, key-001, ...
	Keys int
	// Exponent of the power law of key popularity.
	Exponent float64
	// Rate is the requests per second offered, spread evenly in time.
	Rate float64
	// Workers bounds the requests in flight; a request that finds every
	// worker busy is dropped and counted, so the offered rate stays honest.
	Workers int
	// Timeout bounds one request.
	Timeout time.Duration
	// Seed makes the key draws and the shifts repeatable.
	Seed uint64
}

// DefaultConfig is the paper's §5.2.3 key distribution (100 keys, exponent
// 1.5) at a rate a small machine sustains beside ten tasks.
func DefaultConfig() Config {
	return Config{Keys: 100, Exponent: 1.5, Rate: 2000, Workers: 64, Timeout: 2 * time.Second, Seed: 1}
}

// Validate reports what is wrong with c, if anything.
func (c Config) Validate() error {
	switch {
	case c.Keys < 1 || c.Keys > 100000:
		return fmt.Errorf("loadshift: %d keys; use 1 to 100000", c.Keys)
	case !(c.Rate > 0 && c.Rate <= 1e6):
		return fmt.Errorf("loadshift: rate %g requests/s; use a rate above 0 and at most 1e6", c.Rate)
	case c.Workers < 1:
		return fmt.Errorf("loadshift: %d workers; use at least 1", c.Workers)
	case c.Timeout <= 0:
		return fmt.Errorf("loadshift: request timeout %v; use a positive timeout", c.Timeout)
	}
	_, err := NewPowerLaw(c.Keys, c.Exponent)
	return err
}

// Driver offers the load of a Config to a job's tasks and meters how much
// each task answers.
type Driver struct {
	cfg  Config
	law  *PowerLaw
	keys []string
	ck   *clerk.Clerk
	hc   *http.Client
	// scheme is "https" when the Clerk has TLS and the Driver made hc.
	scheme string
	meter  *Meter

	perm atomic.Pointer[[]int] // perm[rank] is the index in keys of the key with that rank

	mu    sync.Mutex
	rng   *rand.Rand // deals the ranks at each shift
	shift int

	answered, failed, dropped atomic.Uint64
	misdirected               atomic.Uint64 // answered 421: the task does not own the key
}

// NewDriver returns a Driver that routes with ck and sends with hc (nil:
// a client with keep-alive connections for every worker, speaking HTTPS
// through ck.DialTaskTLS when ck has TLS). Its Meter starts
// now.
func NewDriver(cfg Config, ck *clerk.Clerk, hc *http.Client) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	law, _ := NewPowerLaw(cfg.Keys, cfg.Exponent)
	scheme := "http"
	if hc == nil {
		tr := &http.Transport{MaxIdleConnsPerHost: cfg.Workers, MaxIdleConns: 4 * cfg.Workers}
		if ck.TLS() {
			// Tasks serve TLS; each connection reaches only the task the
			// assignment places at its address.
			tr.DialTLSContext, tr.ForceAttemptHTTP2, scheme = ck.DialTaskTLS, true, "https"
		}
		hc = &http.Client{Transport: tr}
	}
	d := &Driver{
		cfg: cfg, law: law, ck: ck, hc: hc, scheme: scheme,
		keys:  make([]string, cfg.Keys),
		meter: NewMeter(time.Now()),
		rng:   rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
	}
	for i := range d.keys {
		d.keys[i] = fmt.Sprintf("key-%03d", i)
	}
	d.deal()
	return d, nil
}

// deal gives the ranks to the keys in a new random order.
func (d *Driver) deal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.rng.Perm(len(d.keys))
	d.perm.Store(&p)
}

// Shift moves the hot keys: every rank goes to a key drawn at random.
func (d *Driver) Shift() {
	d.deal()
	d.mu.Lock()
	d.shift++
	d.mu.Unlock()
}

// HotKey is the key that currently carries the most load.
func (d *Driver) HotKey() string { return d.keys[(*d.perm.Load())[0]] }

// Law is the key popularity distribution.
func (d *Driver) Law() *PowerLaw { return d.law }

// Meter counts the requests each task answered.
func (d *Driver) Meter() *Meter { return d.meter }

// Stats counts requests answered by a task, failed (no task, or no
// answer), and dropped because every worker was busy.
func (d *Driver) Stats() (answered, failed, dropped uint64) {
	return d.answered.Load(), d.failed.Load(), d.dropped.Load()
}

// Misdirected counts the answered requests that the task refused with 421
// Misdirected Request: it does not own the key (kvcache's answer).
func (d *Driver) Misdirected() uint64 { return d.misdirected.Load() }

// Tasks returns the addresses of the tasks of the current assignment,
// sorted: the tasks the load should be spread over.
func (d *Driver) Tasks() []string {
	a := d.ck.Assignment()
	if a == nil {
		return nil
	}
	out := make([]string, 0, len(a.Tasks))
	for _, t := range a.Tasks {
		if t.Addr != "" {
			out = append(out, t.Addr)
		}
	}
	slices.Sort(out)
	return out
}

// ExpectedImbalance is the imbalance the current assignment would give the
// current key popularity if every replica of a key took an equal share of
// its requests: what a perfect load measurement would predict. Comparing
// it with the measured imbalance tells a poor assignment from poor routing.
// ok is false before the first assignment.
func (d *Driver) ExpectedImbalance() (float64, bool) {
	a := d.ck.Assignment()
	if a == nil || len(a.Tasks) == 0 {
		return 0, false
	}
	perm := *d.perm.Load()
	load := make(map[string]float64, len(a.Tasks))
	for rank, k := range perm {
		tasks := a.Slices[a.Find(assign.HashString(d.keys[k]))].Tasks
		for _, t := range tasks {
			load[t] += d.law.Share(rank) / float64(len(tasks))
		}
	}
	peak := 0.0
	for _, t := range a.Tasks {
		peak = max(peak, load[t.Name])
	}
	return peak * float64(len(a.Tasks)), true // the shares sum to 1
}

// Replicas returns how many tasks serve each of the n hottest keys, in
// rank order, under the current assignment (nil before the first).
func (d *Driver) Replicas(n int) []int {
	a := d.ck.Assignment()
	if a == nil {
		return nil
	}
	perm := *d.perm.Load()
	out := make([]int, min(n, len(perm)))
	for rank := range out {
		out[rank] = len(a.Slices[a.Find(assign.HashString(d.keys[perm[rank]]))].Tasks)
	}
	return out
}

// paceInterval is how often the pacer releases the requests due.
const paceInterval = 5 * time.Millisecond

// Run offers the load until ctx ends, then waits for the requests in
// flight and returns nil. The Clerk must be running.
func (d *Driver) Run(ctx context.Context) error {
	if err := d.ck.WaitReady(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	tokens := make(chan struct{}, d.cfg.Workers)
	var wg sync.WaitGroup
	for w := range d.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.work(ctx, tokens, rand.New(rand.NewPCG(d.cfg.Seed, uint64(w)+1)))
		}()
	}
	defer wg.Wait()
	defer close(tokens)

	t := time.NewTicker(paceInterval)
	defer t.Stop()
	last, owed := time.Now(), 0.0
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			owed += d.cfg.Rate * now.Sub(last).Seconds()
			last = now
			for ; owed >= 1; owed-- {
				select {
				case tokens <- struct{}{}:
				default:
					d.dropped.Add(1)
				}
			}
		}
	}
}

func (d *Driver) work(ctx context.Context, tokens <-chan struct{}, rng *rand.Rand) {
	for range tokens {
		if ctx.Err() != nil {
			continue // drain what the pacer left, sending nothing more
		}
		key := d.keys[(*d.perm.Load())[d.law.Sample(rng)]]
		addr, ok := d.ck.PickTaskString(key)
		if !ok {
			d.failed.Add(1)
			continue
		}
		if err := d.get(ctx, addr, key); err != nil {
			d.failed.Add(1)
			continue
		}
		d.answered.Add(1)
		d.meter.Add(addr, time.Now())
	}
}

// get sends one read; any HTTP answer, even a refusal, is load the task
// received. A request in flight when Run's context ends still completes
// (within Timeout), so the Meter misses nothing a task answered.
func (d *Driver) get(ctx context.Context, addr, key string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.scheme+"://"+addr+"/kv/"+key, nil)
	if err != nil {
		return err
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusMisdirectedRequest {
		d.misdirected.Add(1)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}
