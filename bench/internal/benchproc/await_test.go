package benchproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Await sees a line written after it was called.
func TestAwait(t *testing.T) {
	dir := t.TempDir()
	go_ := filepath.Join(dir, "go")
	p, err := Start("sh", filepath.Join(dir, "log"), "ready", nil, "/bin/sh", "-c",
		`echo ready; while [ ! -e "$0" ]; do sleep 0.01; done; echo other; echo failpoint: x fired`, go_)
	if err != nil {
		t.Fatal(err)
	}
	defer StopAll([]*Proc{p}, time.Second)
	if _, err := p.WaitReady(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	fired := p.Await("x fired")
	if err := os.WriteFile(go_, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-fired:
		if !strings.Contains(line, "failpoint: x fired") {
			t.Errorf("Await gave %q", line)
		}
	case <-p.Exited():
		select {
		case line := <-fired:
			if !strings.Contains(line, "failpoint: x fired") {
				t.Errorf("Await gave %q", line)
			}
		default:
			t.Error("the process exited and Await saw no line")
		}
	}
}
