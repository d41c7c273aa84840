package distributor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/slicerd/slicerd/api"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/roles/watch"
	"github.com/slicerd/slicerd/storage"
)

// BenchmarkBackupWatchTick measures one poll tick of 1,000 Backup watchers
// of a 10,000-slice assignment: per-stream, each watcher reads and decodes
// the store (the former design); shared, one poller reads and encodes once
// and every watcher picks up the published copy.
func BenchmarkBackupWatchTick(b *testing.B) {
	const watchers = 1000
	store, err := storage.OpenDataDir(b.TempDir(), storage.BoltOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var tasks []assign.Task
	for i := range 100 {
		tasks = append(tasks, assign.Task{Name: fmt.Sprintf("t%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 10000+i)})
	}
	a, err := assign.Initial("kv", tasks, assign.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	// 10,000 even slices, 100 per task.
	const slices = 10000
	width := assign.KeySpaceEnd / slices
	a.Slices = make([]assign.Slice, slices)
	for i := range slices {
		a.Slices[i] = assign.Slice{Start: assign.SliceKey(i) * width, End: assign.SliceKey(i+1) * width, Tasks: []string{tasks[i%len(tasks)].Name}}
	}
	a.Slices[slices-1].End = assign.KeySpaceEnd
	ctx := context.Background()
	if err := store.Commit(ctx, "kv", 0, a); err != nil {
		b.Fatal(err)
	}
	bk := &Backup{store: store, pollers: map[string]*poller{}}
	b.Logf("%d slices, %d watchers", len(a.Slices), watchers)

	b.Run("per-stream", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			for range watchers {
				rec, err := bk.load(ctx, "kv")
				if err != nil {
					b.Fatal(err)
				}
				_ = api.ToProto(rec)
			}
		}
	})
	b.Run("shared", func(b *testing.B) {
		b.ReportAllocs()
		l := watch.New()
		for i := range b.N {
			rec, err := bk.load(ctx, "kv")
			if err != nil {
				b.Fatal(err)
			}
			rec.Generation = uint64(i + 1) // each tick a new generation, the worst case
			l.Publish(rec, time.Time{})
			for range watchers {
				if l.Message() == nil {
					b.Fatal("no message")
				}
			}
		}
	})
}
