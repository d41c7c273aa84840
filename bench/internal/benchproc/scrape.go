package benchproc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sample is one series of a Prometheus text exposition: its name, labels
// and value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples are the series of one scrape.
type Samples []Sample

// Scrape reads the metrics served at url (http://host:port/metrics).
func Scrape(ctx context.Context, url string) (Samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics reads the Prometheus text format: every sample line
// (comments and blank lines skipped; timestamps ignored).
func ParseMetrics(r io.Reader) (Samples, error) {
	var out Samples
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(rest, "{ "); i < 0 {
		return s, fmt.Errorf("metrics line %q: no value", line)
	} else {
		s.Name, rest = rest[:i], rest[i:]
	}
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return s, fmt.Errorf("metrics line %q: bad labels", line)
			}
			name := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			for {
				if rest == "" {
					return s, fmt.Errorf("metrics line %q: unterminated label value", line)
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' && rest != "" {
					switch rest[0] {
					case 'n':
						c = '\n'
					default:
						c = rest[0]
					}
					rest = rest[1:]
				}
				val.WriteByte(c)
			}
			s.Labels[name] = val.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("metrics line %q: no value", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("metrics line %q: %w", line, err)
	}
	s.Value = v
	return s, nil
}

// matches reports whether s has every label of labels (name, value pairs).
func (s Sample) matches(labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if s.Labels[labels[i]] != labels[i+1] {
			return false
		}
	}
	return true
}

// Sum adds the values of the series of name that have labels (name,
// value pairs), over every other label.
func (ss Samples) Sum(name string, labels ...string) float64 {
	total := 0.0
	for _, s := range ss {
		if s.Name == name && s.matches(labels) {
			total += s.Value
		}
	}
	return total
}

// Histogram is a Prometheus histogram read from a scrape, summed over the
// series that match: cumulative counts per upper bound, sorted, the last
// bound +Inf.
type Histogram struct {
	Bounds []float64
	Counts []float64 // observations ≤ Bounds[i]
	Count  float64
	Sum    float64
}

// Histogram reads histogram name (its _bucket, _count and _sum series)
// summed over the series with labels.
func (ss Samples) Histogram(name string, labels ...string) Histogram {
	byBound := map[float64]float64{}
	for _, s := range ss {
		if s.Name != name+"_bucket" || !s.matches(labels) {
			continue
		}
		le, err := strconv.ParseFloat(s.Labels["le"], 64)
		if err != nil {
			continue
		}
		byBound[le] += s.Value
	}
	h := Histogram{Count: ss.Sum(name+"_count", labels...), Sum: ss.Sum(name+"_sum", labels...)}
	for b := range byBound {
		h.Bounds = append(h.Bounds, b)
	}
	slices.Sort(h.Bounds)
	for _, b := range h.Bounds {
		h.Counts = append(h.Counts, byBound[b])
	}
	return h
}

// Sub is what h observed since before, a scrape of the same histogram.
func (h Histogram) Sub(before Histogram) Histogram {
	out := Histogram{Bounds: slices.Clone(h.Bounds), Counts: slices.Clone(h.Counts), Count: h.Count - before.Count, Sum: h.Sum - before.Sum}
	for i, b := range out.Bounds {
		if j := slices.Index(before.Bounds, b); j >= 0 {
			out.Counts[i] -= before.Counts[j]
		}
	}
	return out
}

// Within is the fraction of observations at or below le, a bucket bound
// (NaN without observations).
func (h Histogram) Within(le float64) float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	i := slices.Index(h.Bounds, le)
	if i < 0 {
		return math.NaN()
	}
	return h.Counts[i] / h.Count
}

// Quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linear interpolation inside the bucket that holds it, from 0 for
// the first bucket; the highest finite bound when it falls in +Inf.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 || len(h.Bounds) == 0 {
		return math.NaN()
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for i, b := range h.Bounds {
		if h.Counts[i] >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			in := h.Counts[i] - below
			if in <= 0 {
				return b
			}
			return lower + (b-lower)*(rank-below)/in
		}
		lower, below = b, h.Counts[i]
	}
	return lower
}

// LoggedMetricsAddr waits up to timeout for slicerd's "serving metrics"
// log line (JSON, in logPath) and returns its metrics address.
func LoggedMetricsAddr(logPath string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(logPath)
		if err != nil {
			return "", err
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if !strings.Contains(line, `"msg":"serving metrics"`) {
				continue
			}
			var rec struct {
				Addr string `json:"metrics_addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Addr != "" {
				return rec.Addr, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no \"serving metrics\" line in %s within %v", logPath, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
