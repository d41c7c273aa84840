package sim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Workload names the generator knows.
const (
	// WorkloadPowerLaw is the load of the Slicer paper's reaction-time
	// experiment (§5.2.3): 100 keys with weights 1/rank^1.5, 8,000 units a
	// window, whose hottest keys move to other keys every few windows.
	WorkloadPowerLaw = "power-law"
	// WorkloadZipf samples 1,000 requests a window over 10,000 keys with
	// Zipf exponent 1.1: a long tail of cold keys, a few hot ones.
	WorkloadZipf = "zipf"
	// WorkloadDiurnal has 20 keys whose loads follow sine waves with a
	// period of 24 windows, each shifted in phase, so the hot spot travels.
	WorkloadDiurnal = "diurnal"
	// WorkloadFailures is power-law while tasks fail and come back: every
	// few windows one task leaves and rejoins three windows later.
	WorkloadFailures = "failures"
	// WorkloadFlashCrowd is a steady skewed load (1,000 keys, weights
	// 1/rank^1.1, 10,000 units a window) on which, every 6 windows, 3 cold
	// keys become the hottest from one window to the next, stay so for 2
	// windows and fade over 2 more: the load a decision fitted to the
	// window it saw is wrong for the next.
	WorkloadFlashCrowd = "flash-crowd"
	// WorkloadLowRate samples 500 requests a window over 300 keys of a
	// load that never changes (weights 1/rank^0.8): what a task reports
	// at about 100 requests a second, where each window's figures are
	// mostly sampling noise, and a decision that moves load chases it.
	WorkloadLowRate = "low-rate"
)

// Workloads lists the generator's workloads in a stable order.
func Workloads() []string {
	return []string{WorkloadPowerLaw, WorkloadZipf, WorkloadDiurnal, WorkloadFailures, WorkloadFlashCrowd, WorkloadLowRate}
}

// Generator limits keep a mistyped flag from writing a huge file.
const (
	MaxGenWindows = 100_000
	MaxGenTasks   = 10_000
	MaxGenKeys    = 1_000_000
)

// Tunables of the workloads.
const (
	powerLawExponent   = 1.5
	powerLawTotal      = 8000.0
	powerLawShiftEvery = 4 // windows between shifts of the hot keys
	zipfExponent       = 1.1
	zipfRequests       = 1000
	diurnalPeriod      = 24
	failureEvery       = 5 // windows between task failures
	failureDownFor     = 3 // windows a failed task stays away
	crowdExponent      = 1.1
	crowdTotal         = 10000.0
	crowdEvery         = 6   // windows between flash crowds
	crowdKeys          = 3   // keys in each crowd
	crowdPeak          = 1.5 // a crowd key's peak over the steady hottest key's load
	lowRateExponent    = 0.8
	lowRateRequests    = 500
)

// crowdProfile is a flash crowd key's load over the windows from its
// start, as a fraction of its peak: cold the window before, the hottest
// at once.
var crowdProfile = []float64{1, 1, 0.6, 0.3}

// GenConfig says what trace to generate.
type GenConfig struct {
	Workload string
	Windows  int
	Seed     uint64
	Tasks    int
	// Keys overrides the workload's number of keys (0 keeps its default).
	Keys int
	// Bytes, if positive, gives every key state: its first load line
	// carries "bytes", drawn once per key from a log-normal distribution
	// with this mean (σ = 0.8, as cache entry sizes spread). The loads are
	// the same as without it.
	Bytes float64
}

// MaxGenBytes bounds GenConfig.Bytes, the mean state per key.
const MaxGenBytes = 1 << 30

// Validate checks the workload name and that windows, tasks and keys are
// within the generator's limits.
func (c GenConfig) Validate() error {
	if !slices.Contains(Workloads(), c.Workload) {
		return fmt.Errorf("%w: unknown workload %q; use one of %s", ErrInvalidConfig, c.Workload, strings.Join(Workloads(), ", "))
	}
	if c.Windows < 1 || c.Windows > MaxGenWindows {
		return fmt.Errorf("%w: %d windows; use 1 to %d", ErrInvalidConfig, c.Windows, MaxGenWindows)
	}
	if c.Tasks < 1 || c.Tasks > MaxGenTasks {
		return fmt.Errorf("%w: %d tasks; use 1 to %d", ErrInvalidConfig, c.Tasks, MaxGenTasks)
	}
	if c.Keys < 0 || c.Keys > MaxGenKeys {
		return fmt.Errorf("%w: %d keys; use 1 to %d, or 0 for the workload's default", ErrInvalidConfig, c.Keys, MaxGenKeys)
	}
	if !(c.Bytes >= 0 && c.Bytes <= MaxGenBytes) {
		return fmt.Errorf("%w: %v bytes per key; use 0 (no state) to %d", ErrInvalidConfig, c.Bytes, MaxGenBytes)
	}
	return nil
}

func (c GenConfig) withDefaults() GenConfig {
	if c.Keys == 0 {
		switch c.Workload {
		case WorkloadZipf:
			c.Keys = 10_000
		case WorkloadDiurnal:
			c.Keys = 20
		case WorkloadFlashCrowd:
			c.Keys = 1000
		case WorkloadLowRate:
			c.Keys = 300
		default:
			c.Keys = 100
		}
	}
	return c
}

// Generate writes a trace of cfg's workload to w. The same configuration
// always produces the same bytes.
func Generate(w io.Writer, cfg GenConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	g := &generator{
		cfg: cfg,
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		bw:  bufio.NewWriter(w),
	}
	if cfg.Bytes > 0 {
		// A stream of its own, so that the loads do not change with it.
		g.sizes = rand.New(rand.NewPCG(cfg.Seed^0x5bd1e995, cfg.Seed))
		g.sized = make(map[string]bool)
	}
	switch cfg.Workload {
	case WorkloadPowerLaw:
		g.powerLaw(false)
	case WorkloadFailures:
		g.powerLaw(true)
	case WorkloadZipf:
		g.zipf()
	case WorkloadDiurnal:
		g.diurnal()
	case WorkloadFlashCrowd:
		g.flashCrowd()
	case WorkloadLowRate:
		g.lowRate()
	}
	return g.bw.Flush()
}

type generator struct {
	cfg GenConfig
	rng *rand.Rand
	bw  *bufio.Writer
	buf []byte
	// sizes draws state sizes, and sized holds the keys given theirs,
	// when GenConfig.Bytes is set.
	sizes *rand.Rand
	sized map[string]bool
}

func (g *generator) taskNames() []string {
	names := make([]string, g.cfg.Tasks)
	for i := range names {
		names[i] = "t" + strconv.Itoa(i)
	}
	return names
}

func (g *generator) tasksLine(window int, tasks []string) {
	b := g.buf[:0]
	b = append(b, `{"window":`...)
	b = strconv.AppendInt(b, int64(window), 10)
	b = append(b, `,"tasks":[`...)
	for i, t := range tasks {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, t)
	}
	b = append(b, "]}\n"...)
	g.buf = b
	g.bw.Write(b)
}

// loadLine writes one key's load, rounded to three decimals to keep
// traces small. Keys are plain ASCII, where Go and JSON quoting agree.
func (g *generator) loadLine(window int, key string, load float64) {
	b := g.buf[:0]
	b = append(b, `{"window":`...)
	b = strconv.AppendInt(b, int64(window), 10)
	b = append(b, `,"key":`...)
	b = strconv.AppendQuote(b, key)
	b = append(b, `,"load":`...)
	b = strconv.AppendFloat(b, math.Round(load*1000)/1000, 'f', -1, 64)
	if g.sizes != nil && !g.sized[key] {
		g.sized[key] = true
		const sigma = 0.8
		size := g.cfg.Bytes * math.Exp(sigma*g.sizes.NormFloat64()-sigma*sigma/2)
		b = append(b, `,"bytes":`...)
		b = strconv.AppendFloat(b, math.Max(1, math.Round(size)), 'f', -1, 64)
	}
	b = append(b, "}\n"...)
	g.buf = b
	g.bw.Write(b)
}

// noise is a multiplicative jitter in [1-f, 1+f).
func (g *generator) noise(f float64) float64 { return 1 - f + 2*f*g.rng.Float64() }

func (g *generator) powerLaw(failures bool) {
	n := g.cfg.Keys
	weights := make([]float64, n)
	var sum float64
	for r := range weights {
		weights[r] = 1 / math.Pow(float64(r+1), powerLawExponent)
		sum += weights[r]
	}
	all := g.taskNames()
	down := map[string]int{} // failed task -> window it comes back
	loads := make([]float64, n)
	var rankOf []int // key index -> rank
	for w := range g.cfg.Windows {
		if w == 0 {
			g.tasksLine(0, all)
		} else if failures {
			changed := false
			for t, back := range down {
				if back == w {
					delete(down, t)
					changed = true
				}
			}
			if w%failureEvery == 2 && g.cfg.Tasks-len(down) > 2 {
				var up []string
				for _, t := range all {
					if _, ok := down[t]; !ok {
						up = append(up, t)
					}
				}
				down[up[g.rng.IntN(len(up))]] = w + failureDownFor
				changed = true
			}
			if changed {
				var live []string
				for _, t := range all {
					if _, ok := down[t]; !ok {
						live = append(live, t)
					}
				}
				g.tasksLine(w, live)
			}
		}
		if w%powerLawShiftEvery == 0 {
			rankOf = g.rng.Perm(n)
		}
		for k := range loads {
			loads[k] = powerLawTotal * weights[rankOf[k]] / sum * g.noise(0.05)
		}
		for k, l := range loads {
			g.loadLine(w, "key:"+strconv.Itoa(k), l)
		}
	}
}

func (g *generator) zipf() {
	z := rand.NewZipf(g.rng, zipfExponent, 1, uint64(g.cfg.Keys-1))
	counts := make([]int, g.cfg.Keys)
	g.tasksLine(0, g.taskNames())
	for w := range g.cfg.Windows {
		clear(counts)
		for range zipfRequests {
			counts[z.Uint64()]++
		}
		for k, c := range counts {
			if c > 0 {
				g.loadLine(w, "user:"+strconv.Itoa(k), float64(c))
			}
		}
	}
}

func (g *generator) diurnal() {
	n := g.cfg.Keys
	base := make([]float64, n)
	for k := range base {
		base[k] = 100 * (0.5 + g.rng.Float64())
	}
	g.tasksLine(0, g.taskNames())
	for w := range g.cfg.Windows {
		for k := range n {
			phase := 2 * math.Pi * float64(k) / float64(n)
			l := base[k] * (1 + 0.8*math.Sin(2*math.Pi*float64(w)/diurnalPeriod+phase)) * g.noise(0.05)
			g.loadLine(w, "region:"+strconv.Itoa(k), l)
		}
	}
}

// rankWeights returns n weights 1/rank^exponent scaled to add up to total.
func rankWeights(n int, exponent, total float64) []float64 {
	w := make([]float64, n)
	var sum float64
	for r := range w {
		w[r] = 1 / math.Pow(float64(r+1), exponent)
		sum += w[r]
	}
	for r := range w {
		w[r] *= total / sum
	}
	return w
}

func (g *generator) flashCrowd() {
	n := g.cfg.Keys
	base := rankWeights(n, crowdExponent, crowdTotal)
	rankOf := g.rng.Perm(n) // key index -> rank, for the whole trace
	peak := crowdPeak * base[0]
	crowd := map[int]int{} // key index -> window its crowd started
	g.tasksLine(0, g.taskNames())
	for w := range g.cfg.Windows {
		if w%crowdEvery == crowdEvery/2 && n > 1 {
			// Cold keys: from the colder half.
			for len(crowd) < crowdKeys && len(crowd) < n/2 {
				k := g.rng.IntN(n)
				if _, busy := crowd[k]; !busy && rankOf[k] >= n/2 {
					crowd[k] = w
				}
			}
		}
		for k := range n {
			l := base[rankOf[k]]
			if start, ok := crowd[k]; ok {
				if i := w - start; i < len(crowdProfile) {
					l = max(l, peak*crowdProfile[i])
				} else {
					delete(crowd, k)
				}
			}
			g.loadLine(w, "user:"+strconv.Itoa(k), l*g.noise(0.05))
		}
	}
}

func (g *generator) lowRate() {
	n := g.cfg.Keys
	cum := rankWeights(n, lowRateExponent, 1)
	for r := 1; r < n; r++ {
		cum[r] += cum[r-1]
	}
	rankOf := g.rng.Perm(n) // rank -> key index
	counts := make([]int, n)
	g.tasksLine(0, g.taskNames())
	for w := range g.cfg.Windows {
		clear(counts)
		for range lowRateRequests {
			r, _ := slices.BinarySearch(cum, g.rng.Float64()*cum[n-1])
			counts[rankOf[min(r, n-1)]]++
		}
		for k, c := range counts {
			if c > 0 {
				g.loadLine(w, "user:"+strconv.Itoa(k), float64(c))
			}
		}
	}
}
