package subset

import (
	"fmt"
	"testing"
)

// Clients call Rocksteadier when they start and whenever the Distributor
// list changes; FrontendIndex once per subscriber.
func BenchmarkRocksteadier(b *testing.B) {
	for _, c := range []struct{ n, k int }{{5, 2}, {12, 3}, {100, 10}, {1000, 10}} {
		b.Run(fmt.Sprintf("n=%d/k=%d", c.n, c.k), func(b *testing.B) {
			b.ReportAllocs()
			var f uint64
			for b.Loop() {
				Rocksteadier(f, c.n, c.k)
				f++
			}
		})
	}
}

func BenchmarkBaselines(b *testing.B) {
	for _, a := range Algorithms()[1:] {
		b.Run(a.Name+"/n=100/k=10", func(b *testing.B) {
			b.ReportAllocs()
			var f uint64
			for b.Loop() {
				a.Subset(f, 100, 10)
				f++
			}
		})
	}
}

func BenchmarkFrontendIndex(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		FrontendIndex("slicelet-kv-prod-us-east1-0042")
	}
}

func BenchmarkTaskNumber(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		TaskNumber("slicelet-kv-prod-us-east1-0042")
	}
}
