//go:build linux

package main

import (
	"io"
	"strings"
	"testing"
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
