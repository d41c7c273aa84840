package cachetraffic

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	at := time.Unix(100, 0)
	ss := []Second{
		{At: at, Reads: 100, Hits: 90},
		{At: at.Add(time.Second), Reads: 100, Hits: 70, Failed: 1},
		{At: at.Add(2 * time.Second)}, // no reads: not a miss
		{At: at.Add(3 * time.Second), Reads: 50, Hits: 50, Dropped: 3},
	}
	got := Summarize(ss)
	want := Summary{Seconds: 4, Reads: 250, Hits: 210, Failed: 1, Dropped: 3, HitRate: 0.84, MinHitRate: 0.7, MinHitAtSec: 1}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if s := Summarize(nil); s.HitRate != 1 || s.MinHitRate != 1 {
		t.Errorf("Summarize(nil) = %+v", s)
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{{Keys: 0, Exponent: 1.1, Rate: 1, Workers: 1}, {Keys: 1, Exponent: 1, Rate: 1, Workers: 1},
		{Keys: 1, Exponent: 1.1, Rate: 0, Workers: 1}, {Keys: 1, Exponent: 1.1, Rate: 1, Workers: 0}} {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
}

// The last second, cut short when the driver stopped, counts its reads but
// not as a one-second window: two reads, one a miss, are no 50% second.
func TestSummarizeSkipsPartialSecond(t *testing.T) {
	s := Summarize([]Second{{Reads: 400, Hits: 380}, {Reads: 400, Hits: 360}, {Reads: 2, Hits: 1, Failed: 1, Partial: true}})
	if s.MinHitRate != 0.9 || s.MinHitAtSec != 1 || s.Reads != 802 || s.Failed != 1 || s.Seconds != 3 {
		t.Errorf("Summarize = %+v; want the lowest whole second (0.9 at 1), and every read and failure counted", s)
	}
}
