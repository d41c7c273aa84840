//go:build linux

package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/slicerd/slicerd/storage"
)

func TestParseRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-mode", "flood"},
		{"-mode", "hold"},
		{"-slices", "0"},
		{"-slices", "20001"},
		{"-subscribers", "-1"},
		{"-per-ip", "0"},
		{"-subscribers", "251000", "-per-ip", "1000"},
		{"-mode", "hold", "-target", "127.0.0.1:1", "-ip-from", "1"},
	} {
		if _, err := parse(args, io.Discard); err == nil {
			t.Errorf("parse(%q) accepted it", strings.Join(args, " "))
		}
	}
	o, err := parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.mode != "subscribers" || o.subscribers != 5000 || o.slices != 10000 || o.conns != 20000 {
		t.Errorf("defaults %+v", o)
	}
}

func TestSeedStoresTheAssignment(t *testing.T) {
	dir := t.TempDir()
	if err := seed(context.Background(), dir, 10000); err != nil {
		t.Fatal(err)
	}
	store, err := storage.OpenDataDir(dir, storage.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec, err := store.Load(context.Background(), "kv")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Current == nil || len(rec.Current.Slices) != 10000 || len(rec.Current.Tasks) != 2 {
		t.Fatalf("stored %+v", rec)
	}
	if rec.Config.MinSlicesPerTask < 5000 {
		t.Errorf("config %+v would merge the 10,000 slices of two tasks", rec.Config)
	}
}
