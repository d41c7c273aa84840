package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestArchitectureListsEveryPackage fails when the package layout in
// docs/architecture.md and the tree disagree: a package missing from the
// table, or a row naming a package that is not there.
func TestArchitectureListsEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Package layout\n")
	if !ok {
		t.Fatal("docs/architecture.md has no '## Package layout' section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]bool{}
	cell := regexp.MustCompile("^\\| ([^|]+) \\|")
	name := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(section, "\n") {
		m := cell.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			listed[n[1]] = true
		}
	}

	var tree []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := d.Name(); path != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			if dir := filepath.ToSlash(filepath.Dir(path)); !slices.Contains(tree, dir) {
				tree = append(tree, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range tree {
		if !listed[dir] && !(dir == "." && listed[". (main)"]) {
			t.Errorf("package %s is not in docs/architecture.md's package layout: add a row saying what it owns", dir)
		}
	}
	for p := range listed {
		if p != ". (main)" && !slices.Contains(tree, p) {
			t.Errorf("docs/architecture.md's package layout names %s, which is not a package in the tree", p)
		}
	}
}
