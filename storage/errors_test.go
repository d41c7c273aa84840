package storage_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/storage"
	"github.com/slicerd/slicerd/storage/storagetest"
)

// shortLock keeps lock-conflict tests quick.
const shortLock = 100 * time.Millisecond

func TestDataDirErrors(t *testing.T) {
	tmp := t.TempDir()
	file := writeFile(t, tmp, "plain", []byte("not a directory"))
	tests := []struct {
		name string
		open func(string, storage.BoltOptions) (*storage.Bolt, error)
		path string
		want []string
	}{
		{"data dir is a file", storage.OpenDataDir, file,
			[]string{file, "--data-dir"}},
		{"data dir under a file", storage.OpenDataDir, filepath.Join(file, "sub"),
			[]string{filepath.Join(file, "sub"), "--data-dir"}},
		{"data file under a file", storage.OpenBolt, filepath.Join(file, "x.db"),
			[]string{filepath.Join(file, "x.db"), "--data-dir"}},
		{"data file in a missing dir", storage.OpenBolt, filepath.Join(tmp, "missing", "x.db"),
			[]string{filepath.Join(tmp, "missing", "x.db"), "directory exists"}},
		{"data file is a directory", storage.OpenBolt, tmp,
			[]string{tmp, "is a directory"}},
		{"empty data dir", storage.OpenDataDir, "",
			[]string{"--data-dir"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.open(tt.path, storage.BoltOptions{})
			if err == nil {
				b.Close()
				t.Fatal("open succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if got, err := os.ReadFile(file); err != nil || string(got) != "not a directory" {
		t.Fatalf("the plain file was touched: %q, %v", got, err)
	}
}

func TestDataDirPermissions(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions; TestDataDirErrors covers unusable paths")
	}
	dir := filepath.Join(t.TempDir(), "locked")
	if err := os.Mkdir(dir, 0o000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	_, err := storage.OpenDataDir(dir, storage.BoltOptions{})
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("open in an inaccessible dir: %v", err)
	}
}

func TestOpenDataDirCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	b, err := storage.OpenDataDir(dir, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir: %v, %v; want mode 0700", fi.Mode(), err)
	}
	if b.Path() != filepath.Join(dir, storage.DataFileName) {
		t.Fatalf("Path = %s", b.Path())
	}
}

func TestLockedInProcess(t *testing.T) {
	s := openTest(t)
	for _, ro := range []bool{false, true} {
		start := time.Now()
		_, err := storage.OpenBolt(s.Path(), storage.BoltOptions{LockTimeout: shortLock, ReadOnly: ro})
		want := fmt.Sprintf("data file %s is in use by another slicerd process", s.Path())
		if !errors.Is(err, storage.ErrLocked) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--data-dir") {
			t.Fatalf("second open (read-only %v): %v, want ErrLocked", ro, err)
		}
		t.Logf("gave up after %v", time.Since(start))
	}
	// The failed opens did not disturb the first.
	mustCommit(t, s, "j", 0, storagetest.Assignment("j", 1, 1, 1))
	s = reopen(t, s, storage.BoltOptions{})
	mustLoad(t, s, "j")
}

const helperEnv = "SLICERD_STORAGE_HELPER_PATH"

// runHelperProcess holds the data file named by helperEnv open until its
// stdin closes. It runs in a child process started by TestLockedAcrossProcesses.
func runHelperProcess() int {
	b, err := storage.OpenBolt(os.Getenv(helperEnv), storage.BoltOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("open")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := b.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestLockedAcrossProcesses checks that a slicerd in another process holds
// the file the same way a second opener in this process does.
func TestLockedAcrossProcesses(t *testing.T) {
	s := openTest(t)
	mustCommit(t, s, "j", 0, storagetest.Assignment("j", 1, 1, 1))
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "open\n" {
		t.Fatalf("helper process: %q, %v; stderr: %s", line, err, stderr.String())
	}

	for _, ro := range []bool{false, true} {
		_, err := storage.OpenBolt(path, storage.BoltOptions{LockTimeout: shortLock, ReadOnly: ro})
		if !errors.Is(err, storage.ErrLocked) || !strings.Contains(err.Error(), "in use by another slicerd process") {
			t.Fatalf("open (read-only %v) while another process holds the file: %v, want ErrLocked", ro, err)
		}
	}

	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper process: %v; stderr: %s", err, stderr.String())
	}
	b, err := storage.OpenBolt(path, storage.BoltOptions{LockTimeout: shortLock})
	if err != nil {
		t.Fatalf("open after the other process exited: %v", err)
	}
	defer b.Close()
	mustLoad(t, b, "j")
}

// validFile returns the bytes of a data file holding a few jobs, and the
// size its pages use (bbolt grows files ahead of use).
func validFile(t *testing.T) ([]byte, int) {
	t.Helper()
	s := openTest(t)
	for i := range 4 {
		job := fmt.Sprintf("job-%d", i)
		mustCommit(t, s, job, 0, storagetest.Assignment(job, 1, 20, 10))
		mustCommit(t, s, job, 1, storagetest.Assignment(job, 2, 20, 10))
	}
	var hwm int64
	if err := s.DB().View(func(tx *bbolt.Tx) error { hwm = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return readFile(t, s.Path()), int(hwm)
}

func TestCorruptFile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	valid, used := validFile(t)
	pageSize := os.Getpagesize()
	if len(valid) < 8*pageSize {
		t.Fatalf("test file is only %d bytes", len(valid))
	}
	flipped := func(off int) []byte {
		b := append([]byte(nil), valid...)
		for i := off; i < off+64; i++ {
			b[i] ^= 0xa5
		}
		return b
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"short garbage", garbage(100)},
		{"garbage", garbage(64 << 10)},
		{"text", []byte(strings.Repeat("this is not a database\n", 2000))},
		{"zeros", make([]byte, 32<<10)},
		{"truncated to one page", valid[:pageSize]},
		{"truncated after the meta pages", valid[:2*pageSize+100]},
		{"truncated to half", valid[:len(valid)/2]},
		{"last used byte missing", valid[:used-1]},
		{"both meta pages damaged", append(flipped(0)[:pageSize], flipped(pageSize)[pageSize:]...)},
	}
	for _, tt := range tests {
		for _, ro := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/read-only=%v", tt.name, ro), func(t *testing.T) {
				path := writeFile(t, t.TempDir(), storage.DataFileName, tt.data)
				b, err := storage.OpenBolt(path, storage.BoltOptions{ReadOnly: ro, LockTimeout: shortLock})
				if err == nil {
					b.Close()
					t.Fatal("open succeeded")
				}
				if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "untouched") {
					t.Fatalf("open: %v, want ErrCorrupt naming the file", err)
				}
				t.Log(err)
				assertUnchanged(t, path, tt.data)
				// Nothing is left holding the file.
				if err := os.Rename(path, path+".bad"); err != nil {
					t.Fatal(err)
				}
				b, err = storage.OpenBolt(path, storage.BoltOptions{LockTimeout: shortLock})
				if err != nil {
					t.Fatalf("fresh open after moving the bad file aside: %v", err)
				}
				b.Close()
			})
		}
	}
}

func TestReadOnlyEmptyFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), storage.DataFileName, nil)
	_, err := storage.OpenBolt(path, storage.BoltOptions{ReadOnly: true})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("read-only open of an empty file: %v", err)
	}
}

// A data file that exists but holds no store is refused and left as it
// is, never replaced by a new empty store: slicerd creates its file whole,
// so an empty one lost what it held (a truncation, a bad restore).
func TestEmptyFileIsRefused(t *testing.T) {
	path := writeFile(t, t.TempDir(), storage.DataFileName, nil)
	_, err := storage.OpenBolt(path, storage.BoltOptions{})
	if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), "empty (0 bytes)") || !strings.Contains(err.Error(), path) {
		t.Fatalf("open of an empty data file: %v; want ErrCorrupt naming it", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the empty data file after the refusal: %v, %v; want it untouched", fi, err)
	}
}

// A new data file appears whole: the schema is written beside it first,
// and a creation that crashed before (its leftover beside the path) is
// no obstacle.
func TestCreateIsWhole(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, storage.DataFileName+".creating", []byte("a creation that crashed"))
	b, err := storage.OpenDataDir(dir, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, b, "j", 0, storagetest.Assignment("j", 1, 1, 1))
	inc := b.Incarnation()
	b.Close()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != storage.DataFileName {
		t.Fatalf("the data dir holds %v; want only %s", entries, storage.DataFileName)
	}
	b, err = storage.OpenDataDir(dir, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Incarnation() != inc {
		t.Fatalf("incarnation %q after reopening, want %q", b.Incarnation(), inc)
	}
}

// rawUpdate changes a closed data file with bbolt directly.
func rawUpdate(t *testing.T, path string, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func TestNotSlicerdFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucket([]byte("something-else"))
		return err
	})
	before := readFile(t, path)
	_, err := storage.OpenBolt(path, storage.BoltOptions{})
	if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), "not a slicerd data file") {
		t.Fatalf("open of a foreign bbolt file: %v", err)
	}
	assertUnchanged(t, path, before)
}

func TestNewerFormat(t *testing.T) {
	s := openTest(t)
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		return tx.Bucket(storage.BucketMeta).Put(storage.KeyFormatVersion, storage.EncodeFormatVersion(storage.FormatVersion+1))
	})
	before := readFile(t, path)
	for _, ro := range []bool{false, true} {
		_, err := storage.OpenBolt(path, storage.BoltOptions{ReadOnly: ro})
		want := fmt.Sprintf("written by a newer slicerd (format %d, this binary reads up to %d); upgrade slicerd", storage.FormatVersion+1, storage.FormatVersion)
		if !errors.Is(err, storage.ErrNewerFormat) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Fatalf("open (read-only %v): %v, want ErrNewerFormat", ro, err)
		}
	}
	assertUnchanged(t, path, before)
}

func TestBadFormatVersion(t *testing.T) {
	for name, v := range map[string][]byte{
		"missing": nil,
		"short":   {1},
		"zero":    storage.EncodeFormatVersion(0),
	} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t)
			path := s.Path()
			s.Close()
			rawUpdate(t, path, func(tx *bbolt.Tx) error {
				if v == nil {
					return tx.Bucket(storage.BucketMeta).Delete(storage.KeyFormatVersion)
				}
				return tx.Bucket(storage.BucketMeta).Put(storage.KeyFormatVersion, v)
			})
			before := readFile(t, path)
			if _, err := storage.OpenBolt(path, storage.BoltOptions{}); !errors.Is(err, storage.ErrCorrupt) {
				t.Fatalf("open: %v, want ErrCorrupt", err)
			}
			assertUnchanged(t, path, before)
		})
	}
}

// TestUndecodableValues damages one stored value of one job: Load and
// Commit of that job fail with ErrCorrupt naming it, the file is left as it
// was, and other jobs are unaffected.
func TestUndecodableValues(t *testing.T) {
	good := storagetest.Assignment("bad", 1, 2, 2)
	goodEnc, err := good.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	other, err := storagetest.Assignment("other", 3, 2, 2).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		key     []byte
		value   []byte
		prevGen uint64 // the generation the committer read
		want    string
	}{
		{"current garbage", storage.KeyCurrent, []byte("\xff\xff\xff garbage"), 2, "current assignment does not decode"},
		{"current truncated", storage.KeyCurrent, goodEnc[:len(goodEnc)/2], 2, "current assignment does not decode"},
		{"current of another job", storage.KeyCurrent, other, 2, `current assignment belongs to job "other"`},
		{"previous garbage", storage.KeyPrevious, []byte{0}, 2, "previous assignment does not decode"},
		{"previous not older", storage.KeyPrevious, goodEnc[:0:0], 2, "previous assignment does not decode"},
		{"config garbage", storage.KeyConfig, []byte("{min_redundancy"), 2, "config does not decode"},
		{"config invalid", storage.KeyConfig, []byte(`{"min_redundancy":0,"max_redundancy":1}`), 2, "config is invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTest(t)
			mustCommit(t, s, "bad", 0, good)
			mustCommit(t, s, "bad", 1, storagetest.Assignment("bad", 2, 3, 1))
			mustCommit(t, s, "fine", 0, storagetest.Assignment("fine", 1, 1, 1))
			path := s.Path()
			s.Close()
			rawUpdate(t, path, func(tx *bbolt.Tx) error {
				return tx.Bucket(storage.BucketJobs).Bucket([]byte("bad")).Put(tt.key, tt.value)
			})
			before := readFile(t, path)
			s, err := storage.OpenBolt(path, storage.BoltOptions{})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer s.Close()
			checkCorrupt := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), `job "bad"`) ||
					!strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
					t.Fatalf("%s: %v, want ErrCorrupt naming the job, the file and %q", op, err, tt.want)
				}
			}
			_, err = s.Load(ctx, "bad")
			checkCorrupt("Load", err)
			checkCorrupt("Commit", s.Commit(ctx, "bad", tt.prevGen, storagetest.Assignment("bad", 3, 1, 1)))
			assertUnchanged(t, path, before)
			if rec := mustLoad(t, s, "fine"); rec.Generation() != 1 {
				t.Fatalf("other job: %+v", rec)
			}
			// Deleting the job is a way to repair it.
			if err := s.Delete(ctx, "bad"); err != nil {
				t.Fatalf("Delete of the unreadable job: %v", err)
			}
			if _, err := s.Load(ctx, "bad"); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("Load after deleting the unreadable job: %v", err)
			}
		})
	}
}

// A generation a deleted job was recorded with that cannot be read stops
// the Commit that would create the job again, as any unreadable value
// does; deleting the job again replaces it.
func TestUndecodableDeletedGeneration(t *testing.T) {
	s := openTest(t)
	mustCommit(t, s, "j", 0, storagetest.Assignment("j", 2, 1, 1))
	if err := s.Delete(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	path := s.Path()
	s.Close()
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		return tx.Bucket(storage.BucketDeleted).Put([]byte("j"), []byte("seven"))
	})
	s, err := storage.OpenBolt(path, storage.BoltOptions{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	before := readFile(t, path)
	err = s.Commit(ctx, "j", 0, storagetest.Assignment("j", 1, 1, 1))
	if !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), `job "j" was deleted at`) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Commit creating a job whose deleted generation is unreadable: %v, want ErrCorrupt naming it and the file", err)
	}
	assertUnchanged(t, path, before)
	if err := s.SetConfig(ctx, "j", assign.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "j"); err != nil {
		t.Fatalf("Delete over an unreadable deleted generation: %v", err)
	}
	a := storagetest.Assignment("j", 1, 1, 1)
	mustCommit(t, s, "j", 0, a)
	if a.Generation != 1 {
		t.Fatalf("after the repair the job was created at generation %d, want 1", a.Generation)
	}
}

func TestOrphanPrevious(t *testing.T) {
	s := openTest(t)
	mustCommit(t, s, "j", 0, storagetest.Assignment("j", 1, 1, 1))
	mustCommit(t, s, "j", 1, storagetest.Assignment("j", 2, 1, 1))
	path := s.Path()
	s.Close()
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		return tx.Bucket(storage.BucketJobs).Bucket([]byte("j")).Delete(storage.KeyCurrent)
	})
	s, err := storage.OpenBolt(path, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Load(ctx, "j"); !errors.Is(err, storage.ErrCorrupt) {
		t.Fatalf("Load: %v, want ErrCorrupt", err)
	}
	before := readFile(t, path)
	if err := s.Commit(ctx, "j", 0, storagetest.Assignment("j", 3, 1, 1)); !errors.Is(err, storage.ErrCorrupt) {
		t.Fatalf("Commit: %v, want ErrCorrupt", err)
	}
	assertUnchanged(t, path, before)
}

func TestJobsCorrupt(t *testing.T) {
	s := openTest(t)
	path := s.Path()
	s.Close()
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		return tx.Bucket(storage.BucketJobs).Put([]byte("stray"), []byte("value"))
	})
	s, err := storage.OpenBolt(path, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Jobs(ctx); !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), "stray") {
		t.Fatalf("Jobs: %v, want ErrCorrupt naming the stray key", err)
	}
}

// A data file that is a symbolic link to a missing file is refused as
// such, and nothing is created at the link's target.
func TestDanglingSymlinkDataFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "slicerd.db")
	path := filepath.Join(dir, storage.DataFileName)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		b, err := storage.OpenDataDir(dir, storage.BoltOptions{ReadOnly: ro, LockTimeout: shortLock})
		if err == nil {
			b.Close()
		}
		if err == nil || errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), target) {
			t.Errorf("open (read-only %v) through a dangling link: %v; want an error naming the link and its target", ro, err)
		}
		if _, err := os.Lstat(target); err == nil {
			t.Fatalf("open (read-only %v) created the link's target %s", ro, target)
		}
	}
}
