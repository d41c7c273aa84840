// Package testlog gives tests a logger: silent, or with go test -v the
// test's own debug lines on stderr, labelled with its name.
package testlog

import (
	"log/slog"
	"os"
	"testing"
)

// Logger returns t's logger.
func Logger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}
