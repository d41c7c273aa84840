package gossip

import (
	"bytes"
	"context"
	"log/slog"
)

// logWriter adapts serf's and memberlist's standard-library loggers to
// slog. They write lines such as "[WARN] memberlist: Refuting a dead
// message"; the bracketed level becomes the slog level and the "serf:" or
// "memberlist:" prefix becomes the component attribute.
type logWriter struct {
	logger    *slog.Logger
	component string // used when the line names none
	// keyringQuery, if set, is called for each of serf's keyring queries
	// that serf reports it could not carry out (see refusedKeyringQuery);
	// the line itself is then left to it.
	keyringQuery func()
}

// serfNoKeyring are the lines serf logs when a keyring query (list,
// install, use, remove) arrives and serf holds no keyring: with the
// sealed transport, every keyring query from gossip.
var serfNoKeyring = [][]byte{
	[]byte("serf: No keyring to modify (encryption not enabled)"),
	[]byte("serf: Keyring is empty (encryption not enabled)"),
}

func (w *logWriter) Write(p []byte) (int, error) {
	level, rest := parseLogLevel(p)
	if w.keyringQuery != nil {
		for _, line := range serfNoKeyring {
			if bytes.Equal(rest, line) {
				w.keyringQuery()
				return len(p), nil
			}
		}
	}
	if level == slog.LevelError && bytes.Contains(rest, closedConn) {
		// memberlist's last sends race its own shutdown; that is expected
		// while a node stops, not an error to page anyone about.
		level = slog.LevelDebug
	}
	ctx := context.Background()
	if !w.logger.Enabled(ctx, level) {
		return len(p), nil
	}
	component, msg := parseLogComponent(rest, w.component)
	w.logger.Log(ctx, level, msg, "component", component)
	return len(p), nil
}

var closedConn = []byte("use of closed network connection")

// parseLogLevel splits off a leading "[LEVEL]". Lines without one log at
// Info with their whole text.
func parseLogLevel(line []byte) (slog.Level, []byte) {
	line = bytes.TrimSpace(line)
	if len(line) < 3 || line[0] != '[' {
		return slog.LevelInfo, line
	}
	end := bytes.IndexByte(line[:min(len(line), 10)], ']')
	if end < 0 {
		return slog.LevelInfo, line
	}
	var level slog.Level
	switch string(line[1:end]) {
	case "TRACE", "DEBUG":
		level = slog.LevelDebug
	case "INFO":
		level = slog.LevelInfo
	case "WARN", "WARNING":
		level = slog.LevelWarn
	case "ERR", "ERROR":
		level = slog.LevelError
	default:
		return slog.LevelInfo, line
	}
	return level, bytes.TrimSpace(line[end+1:])
}

// parseLogComponent splits off a "serf: " or "memberlist: " prefix.
func parseLogComponent(rest []byte, fallback string) (component, msg string) {
	for _, c := range [...]string{"memberlist", "serf"} {
		if len(rest) > len(c)+1 && string(rest[:len(c)]) == c && rest[len(c)] == ':' {
			if m := bytes.TrimSpace(rest[len(c)+1:]); len(m) > 0 {
				return c, string(m)
			}
		}
	}
	if len(rest) == 0 {
		return fallback, "(empty log line)"
	}
	return fallback, string(rest)
}
