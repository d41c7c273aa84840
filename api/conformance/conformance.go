// Package conformance reads the language-neutral conformance vectors in
// this directory (docs/client-contract.md) for Go tests: the clients and
// task libraries of every language pass the same files.
package conformance

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
)

// LookupFile is lookup.json as stored.
type LookupFile struct {
	About string       `json:"about"`
	Cases []LookupCase `json:"cases"`
}

// LookupCase is one assignment and the lookups it answers.
type LookupCase struct {
	Name string `json:"name"`
	// Assignment is a slicer.v1.Assignment in protobuf's JSON form, as
	// WatchAssignment sends it with the Connect protocol and JSON.
	Assignment json.RawMessage `json:"assignment"`
	Lookups    []Lookup        `json:"lookups"`
}

// Lookup is one key, or one slice key, and where it routes.
type Lookup struct {
	// Key in base64, or SliceKey alone for a point of the key space no
	// short key is known to hash to (a slice's first and last keys).
	Key      string `json:"key,omitempty"`
	SliceKey string `json:"slice_key"`
	// Tasks are the names of the slice's tasks, in the assignment's
	// order; Addresses their addresses, in the same order.
	Tasks     []string `json:"tasks"`
	Addresses []string `json:"addresses"`
}

// Case is a LookupCase decoded.
type Case struct {
	Name       string
	Assignment *assign.Assignment
	Lookups    []Routed
}

// Routed is a Lookup decoded: Key is nil for a slice key alone.
type Routed struct {
	Key       []byte
	SliceKey  assign.SliceKey
	Tasks     []string
	Addresses []string
}

// ReadLookups reads and decodes the lookup vectors at path (lookup.json),
// checking that every key hashes to its slice key.
func ReadLookups(path string) ([]Case, error) {
	var f LookupFile
	if err := ReadJSON(path, &f); err != nil {
		return nil, err
	}
	if len(f.Cases) == 0 {
		return nil, fmt.Errorf("%s: no cases", path)
	}
	cases := make([]Case, 0, len(f.Cases))
	for _, c := range f.Cases {
		var p slicerv1.Assignment
		if err := protojson.Unmarshal(c.Assignment, &p); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, c.Name, err)
		}
		a, err := api.FromProto(&p)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, c.Name, err)
		}
		dc := Case{Name: c.Name, Assignment: a}
		for _, l := range c.Lookups {
			h, err := strconv.ParseUint(l.SliceKey, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: slice key %q: %w", path, c.Name, l.SliceKey, err)
			}
			r := Routed{SliceKey: assign.SliceKey(h), Tasks: l.Tasks, Addresses: l.Addresses}
			if l.Key != "" {
				if r.Key, err = base64.StdEncoding.DecodeString(l.Key); err != nil {
					return nil, fmt.Errorf("%s: %s: key %q: %w", path, c.Name, l.Key, err)
				}
				if assign.HashKey(r.Key) != r.SliceKey {
					return nil, fmt.Errorf("%s: %s: key %q does not hash to %d", path, c.Name, l.Key, h)
				}
			}
			dc.Lookups = append(dc.Lookups, r)
		}
		cases = append(cases, dc)
	}
	return cases, nil
}

// WriteJSON writes v to path as indented JSON, as the vectors are stored
// (the Go tests' -update).
func WriteJSON(path string, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// ReadJSON decodes the JSON file at path into v.
func ReadJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
