package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/slicerd/slicerd/internal/cli"
)

// TestFlagReferenceUpToDate fails when the flag reference committed in
// docs/operations.md differs from the one the command definitions produce.
func TestFlagReferenceUpToDate(t *testing.T) {
	const path = "docs/operations.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ref := cli.FlagReference(newApp(io.Discard, io.Discard))
	want, err := cli.ReplaceFlagReference(string(doc), ref)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if string(doc) != want {
		t.Errorf("the flag reference in %s is stale: run 'go generate .' and commit %s", path, path)
	}

	// The command go generate runs prints the same reference.
	var out bytes.Buffer
	if code := cli.Run(context.Background(), newApp(&out, &out), []string{"slicerd", "docs", "flags"}); code != 0 || out.String() != ref {
		t.Errorf("slicerd docs flags: exit %d, output differs from FlagReference:\n%s", code, out.String())
	}
}
