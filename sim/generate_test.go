package sim

import (
	"bytes"
	"errors"
	"math"
	"os"
	"testing"
)

// The committed traces are exactly what the README's commands produce.
func TestTestdataIsReproducible(t *testing.T) {
	for file, cfg := range map[string]GenConfig{
		"power-law":       {Workload: WorkloadPowerLaw, Windows: 24, Seed: 1, Tasks: 10},
		"power-law-bytes": {Workload: WorkloadPowerLaw, Windows: 24, Seed: 1, Tasks: 10, Bytes: 65536},
		"zipf":            {Workload: WorkloadZipf, Windows: 12, Seed: 1, Tasks: 10},
		"diurnal":         {Workload: WorkloadDiurnal, Windows: 48, Seed: 1, Tasks: 10},
		"failures":        {Workload: WorkloadFailures, Windows: 24, Seed: 1, Tasks: 10},
		"flash-crowd":     {Workload: WorkloadFlashCrowd, Windows: 24, Seed: 1, Tasks: 10, Keys: 300},
		"low-rate":        {Workload: WorkloadLowRate, Windows: 24, Seed: 1, Tasks: 3},
	} {
		want, err := os.ReadFile("testdata/" + file + ".jsonl")
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := Generate(&got, cfg); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%s: generated trace differs from testdata/%s.jsonl; regenerate it with the README's command", file, file)
		}
	}
}

func TestGenerateWorkloads(t *testing.T) {
	for _, wl := range Workloads() {
		t.Run(wl, func(t *testing.T) {
			cfg := GenConfig{Workload: wl, Windows: 30, Seed: 42, Tasks: 6}
			var a, b, c bytes.Buffer
			if err := Generate(&a, cfg); err != nil {
				t.Fatal(err)
			}
			if err := Generate(&b, cfg); err != nil {
				t.Fatal(err)
			}
			cfg.Seed++
			if err := Generate(&c, cfg); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Error("same seed, different traces")
			}
			if bytes.Equal(a.Bytes(), c.Bytes()) {
				t.Error("different seeds, same trace")
			}
			ws, err := readAll(t, a.String())
			if err != nil {
				t.Fatal(err)
			}
			if len(ws) != 30 {
				t.Fatalf("%d windows, want 30", len(ws))
			}
			minLive, maxLive := 6, 0
			for _, w := range ws {
				var total float64
				for _, kl := range w.Keys {
					total += kl.Load
				}
				minLive, maxLive = min(minLive, len(w.Tasks)), max(maxLive, len(w.Tasks))
				switch wl {
				case WorkloadPowerLaw, WorkloadFailures:
					if len(w.Keys) != 100 || math.Abs(total-powerLawTotal) > 0.05*powerLawTotal {
						t.Fatalf("window %d: %d keys, total %g", w.Number, len(w.Keys), total)
					}
				case WorkloadZipf:
					if total != zipfRequests {
						t.Fatalf("window %d: %g requests, want %d", w.Number, total, zipfRequests)
					}
				case WorkloadDiurnal:
					if len(w.Keys) != 20 {
						t.Fatalf("window %d: %d keys", w.Number, len(w.Keys))
					}
				case WorkloadFlashCrowd:
					if len(w.Keys) != 1000 || total < 0.95*crowdTotal {
						t.Fatalf("window %d: %d keys, total %g", w.Number, len(w.Keys), total)
					}
				case WorkloadLowRate:
					if total != lowRateRequests {
						t.Fatalf("window %d: %g requests, want %d", w.Number, total, lowRateRequests)
					}
				}
			}
			if wl == WorkloadFailures && (minLive != 5 || maxLive != 6) {
				t.Errorf("live tasks ranged %d..%d, want 5..6", minLive, maxLive)
			} else if wl != WorkloadFailures && minLive != 6 {
				t.Errorf("live tasks dropped to %d", minLive)
			}
		})
	}
}

// The hottest power-law key changes when the load shifts.
func TestPowerLawShiftsHotKeys(t *testing.T) {
	var buf bytes.Buffer
	if err := Generate(&buf, GenConfig{Workload: WorkloadPowerLaw, Windows: 12, Seed: 3, Tasks: 10}); err != nil {
		t.Fatal(err)
	}
	ws, err := readAll(t, buf.String())
	if err != nil {
		t.Fatal(err)
	}
	hottest := func(w *Window) string {
		best := w.Keys[0]
		for _, kl := range w.Keys {
			if kl.Load > best.Load {
				best = kl
			}
		}
		return best.Key
	}
	if hottest(ws[0]) != hottest(ws[1]) {
		t.Error("hot key moved within a period")
	}
	if hottest(ws[0]) == hottest(ws[4]) && hottest(ws[4]) == hottest(ws[8]) {
		t.Error("hot key never moved")
	}
}

// A flash crowd's keys are cold in the window before it and the hottest
// in its first.
func TestFlashCrowdKeysTurnHotAtOnce(t *testing.T) {
	var buf bytes.Buffer
	if err := Generate(&buf, GenConfig{Workload: WorkloadFlashCrowd, Windows: 12, Seed: 5, Tasks: 10}); err != nil {
		t.Fatal(err)
	}
	ws, err := readAll(t, buf.String())
	if err != nil {
		t.Fatal(err)
	}
	crowds := 0
	for i := 1; i < len(ws); i++ {
		before := map[string]float64{}
		var mean float64
		for _, kl := range ws[i-1].Keys {
			before[kl.Key] = kl.Load
			mean += kl.Load / float64(len(ws[i-1].Keys))
		}
		hot := 0
		var steadyMax float64
		for _, kl := range ws[i].Keys {
			if before[kl.Key] < mean {
				continue
			}
			steadyMax = max(steadyMax, kl.Load)
		}
		for _, kl := range ws[i].Keys {
			if before[kl.Key] < mean && kl.Load > steadyMax {
				hot++
			}
		}
		if hot > 0 {
			crowds++
			if hot != crowdKeys {
				t.Errorf("window %d: %d cold keys became the hottest, want %d", ws[i].Number, hot, crowdKeys)
			}
		}
	}
	if crowds != 2 {
		t.Errorf("%d flash crowds in 12 windows, want 2", crowds)
	}
}

func TestGenerateRejects(t *testing.T) {
	for _, cfg := range []GenConfig{
		{Workload: "nope", Windows: 1, Tasks: 1},
		{Workload: WorkloadZipf, Windows: 0, Tasks: 1},
		{Workload: WorkloadZipf, Windows: MaxGenWindows + 1, Tasks: 1},
		{Workload: WorkloadZipf, Windows: 1, Tasks: 0},
		{Workload: WorkloadZipf, Windows: 1, Tasks: 1, Keys: -1},
	} {
		if err := Generate(&bytes.Buffer{}, cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Generate(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
}
