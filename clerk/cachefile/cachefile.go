package cachefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	"github.com/slicerd/slicerd/api"
	slicerv1 "github.com/slicerd/slicerd/api/gen/slicer/v1"
	"github.com/slicerd/slicerd/assign"
	"github.com/slicerd/slicerd/internal/atomicfile"
)

// Format constants.
const (
	// Magic opens every cache file.
	Magic = "SLCRASGN"
	// Version is the format version Encode writes and the newest Decode
	// reads; Decode reads every version from 1 on.
	Version = 2
	// HeaderSize is the length of the fixed header.
	HeaderSize = 20
	// MaxFileSize bounds what Read loads: a cache file larger than this is
	// refused as corrupt rather than read into memory. An assignment of
	// 100,000 slices is a few megabytes.
	MaxFileSize = 1 << 30
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrCorrupt means the bytes are not a cache file of this format: bad
	// magic, bad lengths, bad checksum, or an assignment that does not
	// decode or validate.
	ErrCorrupt = errors.New("cachefile: corrupt")
	// ErrTruncated means the file ends before the lengths in its header
	// say it should (a torn write or a full disk); it also matches
	// ErrCorrupt.
	ErrTruncated = fmt.Errorf("%w: truncated", ErrCorrupt)
	// ErrNewerFormat means the file was written by a newer format version
	// than this build reads.
	ErrNewerFormat = errors.New("cachefile: newer format")
	// ErrWrongJob means the file holds another job's assignment.
	ErrWrongJob = errors.New("cachefile: wrong job")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the cache file bytes of a, which must be valid.
func Encode(a *assign.Assignment) ([]byte, error) {
	if a == nil {
		return nil, errors.New("cachefile: encode: no assignment")
	}
	if len(a.Job) > math.MaxUint16 {
		return nil, fmt.Errorf("cachefile: encode: job name of %d bytes is too long", len(a.Job))
	}
	p := api.ToProto(a)
	size := proto.Size(p)
	if size > MaxFileSize-HeaderSize-len(a.Job) {
		return nil, fmt.Errorf("cachefile: encode: assignment of job %q is %d bytes, above the %d-byte limit", a.Job, size, MaxFileSize)
	}
	buf := make([]byte, HeaderSize, HeaderSize+len(a.Job)+size)
	copy(buf, Magic)
	binary.BigEndian.PutUint16(buf[8:], Version)
	binary.BigEndian.PutUint16(buf[10:], uint16(len(a.Job)))
	binary.BigEndian.PutUint32(buf[12:], uint32(size))
	buf = append(buf, a.Job...)
	buf, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(buf, p)
	if err != nil {
		return nil, fmt.Errorf("cachefile: encode assignment of job %q: %w", a.Job, err)
	}
	if len(buf) != HeaderSize+len(a.Job)+size {
		return nil, fmt.Errorf("cachefile: encode assignment of job %q: protobuf size changed while encoding", a.Job)
	}
	binary.BigEndian.PutUint32(buf[16:], checksum(buf))
	return buf, nil
}

// checksum is the CRC-32C of a whole file except its checksum field.
func checksum(b []byte) uint32 {
	return crc32.Update(crc32.Checksum(b[:16], castagnoli), castagnoli, b[HeaderSize:])
}

// Decode parses cache file bytes and returns the validated assignment. The
// result does not alias data.
func Decode(data []byte) (*assign.Assignment, error) {
	if len(data) < HeaderSize {
		if len(data) < len(Magic) || string(data[:len(Magic)]) == Magic {
			return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrTruncated, len(data), HeaderSize)
		}
		return nil, fmt.Errorf("%w: does not start with %q; not a slicerd assignment cache file", ErrCorrupt, Magic)
	}
	if string(data[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("%w: does not start with %q; not a slicerd assignment cache file", ErrCorrupt, Magic)
	}
	v := binary.BigEndian.Uint16(data[8:])
	switch {
	case v > Version:
		return nil, fmt.Errorf("%w: format version %d, this build reads up to version %d; it was written by a newer slicerd client library", ErrNewerFormat, v, Version)
	case v == 0:
		return nil, fmt.Errorf("%w: format version 0 does not exist (this build reads versions 1 to %d)", ErrCorrupt, Version)
	}
	jobLen := int(binary.BigEndian.Uint16(data[10:]))
	size := int64(binary.BigEndian.Uint32(data[12:]))
	want := int64(HeaderSize) + int64(jobLen) + size
	switch {
	case int64(len(data)) < want:
		return nil, fmt.Errorf("%w: %d bytes, header says %d", ErrTruncated, len(data), want)
	case int64(len(data)) > want:
		return nil, fmt.Errorf("%w: %d bytes, header says %d", ErrCorrupt, len(data), want)
	}
	if got, sum := checksum(data), binary.BigEndian.Uint32(data[16:]); got != sum {
		return nil, fmt.Errorf("%w: checksum %#08x, header says %#08x", ErrCorrupt, got, sum)
	}
	job := string(data[HeaderSize : HeaderSize+jobLen])
	var p slicerv1.Assignment
	if err := proto.Unmarshal(data[HeaderSize+jobLen:], &p); err != nil {
		return nil, fmt.Errorf("%w: assignment of job %q does not decode: %w", ErrCorrupt, job, err)
	}
	a, err := api.FromProto(&p)
	if err != nil {
		return nil, fmt.Errorf("%w: assignment of job %q: %w", ErrCorrupt, job, err)
	}
	if a.Job != job {
		return nil, fmt.Errorf("%w: header names job %q, assignment is for job %q", ErrCorrupt, job, a.Job)
	}
	if v < 2 && a.Incarnation != "" {
		return nil, fmt.Errorf("%w: a version %d file cannot hold an incarnation, but holds %q", ErrCorrupt, v, a.Incarnation)
	}
	return a, nil
}

// Read loads the cache file at path and returns its assignment if it is a
// valid one for job. A missing file is an error matching fs.ErrNotExist.
func Read(path, job string) (*assign.Assignment, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cachefile: read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrCorrupt, path, MaxFileSize)
	}
	a, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if a.Job != job {
		return nil, fmt.Errorf("%w: holds job %q, want job %q", ErrWrongJob, a.Job, job)
	}
	return a, nil
}

// Write replaces the file at path with the encoding of a, atomically and
// durably (see the package documentation).
func Write(path string, a *assign.Assignment) error {
	data, err := Encode(a)
	if err != nil {
		return err
	}
	return writeFile(path, data)
}

func writeFile(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("cachefile: write %s: %w", path, err)
	}
	return nil
}

// CheckWritable reports whether a cache file can be written at path: its
// directory must exist and accept new files, and path must not be a
// directory. It creates and removes a temporary file to find out.
func CheckWritable(path string) error {
	if path == "" {
		return errors.New("cachefile: empty path")
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("cachefile: %s is a directory; name a file inside it", path)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".probe-*")
	if err != nil {
		return fmt.Errorf("cachefile: cannot create files in %s: %w; create the directory or make it writable", dir, err)
	}
	name := tmp.Name()
	tmp.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("cachefile: cannot remove %s: %w", name, err)
	}
	return nil
}
