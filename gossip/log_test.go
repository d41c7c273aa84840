package gossip

import (
	"context"
	"log"
	"log/slog"
	"sync"
	"testing"
)

// recorder is a slog.Handler that keeps records for inspection.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
	level   slog.Level
}

func (r *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.level }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) count(level slog.Level, msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Level == level && (msg == "" || rec.Message == msg) {
			n++
		}
	}
	return n
}

func attr(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

func TestLogWriter(t *testing.T) {
	for _, tc := range []struct {
		line, fallback string
		level          slog.Level
		component, msg string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:5000\n", "serf", slog.LevelDebug, "memberlist", "Stream connection from=127.0.0.1:5000"},
		{"[INFO] serf: EventMemberJoin: a 127.0.0.1\n", "memberlist", slog.LevelInfo, "serf", "EventMemberJoin: a 127.0.0.1"},
		{"[WARN] memberlist: Refuting a suspect message (from: b)\n", "memberlist", slog.LevelWarn, "memberlist", "Refuting a suspect message (from: b)"},
		{"[ERR] memberlist: Conflicting address for b\n", "memberlist", slog.LevelError, "memberlist", "Conflicting address for b"},
		{"[ERROR] serf: x", "serf", slog.LevelError, "serf", "x"},
		{"[TRACE] memberlist: t", "memberlist", slog.LevelDebug, "memberlist", "t"},
		{"[ERR] Failed to shutdown transport: boom\n", "memberlist", slog.LevelError, "memberlist", "Failed to shutdown transport: boom"},
		{"no prefix at all\n", "serf", slog.LevelInfo, "serf", "no prefix at all"},
		{"[BOGUS] serf: x", "serf", slog.LevelInfo, "serf", "[BOGUS] serf: x"},
		{"[WARN]", "serf", slog.LevelWarn, "serf", "(empty log line)"},
		{"[INFO] serfdom: not a prefix", "memberlist", slog.LevelInfo, "memberlist", "serfdom: not a prefix"},
		{"[ERR] memberlist: Failed to send gossip to 127.0.0.1:7946: write udp 127.0.0.1:1->127.0.0.1:7946: use of closed network connection", "memberlist",
			slog.LevelDebug, "memberlist", "Failed to send gossip to 127.0.0.1:7946: write udp 127.0.0.1:1->127.0.0.1:7946: use of closed network connection"},
	} {
		rec := &recorder{level: slog.LevelDebug}
		lg := log.New(&logWriter{logger: slog.New(rec), component: tc.fallback}, "", 0)
		lg.Print(tc.line)
		if len(rec.records) != 1 {
			t.Fatalf("%q: %d records", tc.line, len(rec.records))
		}
		r := rec.records[0]
		if r.Level != tc.level || r.Message != tc.msg || attr(r, "component") != tc.component {
			t.Errorf("%q: got level %v msg %q component %q; want %v %q %q", tc.line, r.Level, r.Message, attr(r, "component"), tc.level, tc.msg, tc.component)
		}
	}
}

func TestLogWriterSkipsDisabledLevels(t *testing.T) {
	rec := &recorder{level: slog.LevelInfo}
	w := &logWriter{logger: slog.New(rec), component: "memberlist"}
	if n, err := w.Write([]byte("[DEBUG] memberlist: noisy\n")); err != nil || n != 26 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if len(rec.records) != 0 {
		t.Errorf("debug line logged at info level: %v", rec.records)
	}
}

func FuzzParseLogLine(f *testing.F) {
	for _, s := range []string{"[DEBUG] memberlist: x\n", "[ERR] serf:", "[", "[]", "[WARN]serf: y", "memberlist: z", " [INFO]  serf:  w  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		level, rest := parseLogLevel([]byte(line))
		switch level {
		case slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError:
		default:
			t.Fatalf("level %v", level)
		}
		c, msg := parseLogComponent(rest, "fallback")
		if c != "serf" && c != "memberlist" && c != "fallback" {
			t.Fatalf("component %q", c)
		}
		if msg == "" {
			t.Fatal("empty message")
		}
	})
}

func BenchmarkLogWriterDebugDiscarded(b *testing.B) {
	w := &logWriter{logger: slog.New(slog.DiscardHandler), component: "memberlist"}
	line := []byte("[DEBUG] memberlist: Initiating push/pull sync with: b 127.0.0.1:7946\n")
	b.ReportAllocs()
	for b.Loop() {
		_, _ = w.Write(line)
	}
}
