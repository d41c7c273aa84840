// Package atomicfile replaces files whole and durably: a reader sees the
// old content or the new, never part of either, and after a crash the new
// content is there once WriteFile has returned.
//
// It owns that sequence (a temporary file beside the target, synced,
// renamed over it, and the directory synced) for every file slicerd
// writes outside its stores: keyrings, the rejoin file, clients' cache
// files.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile replaces the file at path with data, with permissions perm
// exactly (the umask does not apply). The temporary file is in the same
// directory, named ".BASE.tmp-*", and removed if anything fails.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	err = tmp.Chmod(perm)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	// The rename is durable only once the directory entry is.
	return SyncDir(dir)
}

// SyncDir makes a directory's entries durable: a file created, renamed
// or linked in it survives a crash once it returns.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
