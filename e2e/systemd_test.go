package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notifySocket listens on a datagram socket as systemd's $NOTIFY_SOCKET
// does, until the test ends, and returns its path and a function that
// returns the next notification, failing the test after 30 s without one.
func notifySocket(t *testing.T) (string, func(what string) string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan string, 1024)
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-read
	})
	next := func(what string) string {
		t.Helper()
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		select {
		case m := <-msgs:
			return m
		case <-deadline.C:
			t.Fatalf("no notification within 30s while waiting for %s", what)
		}
		return ""
	}
	return path, next
}

// TestSystemdNotifyBinary runs slicerd as systemd runs a Type=notify unit
// with WatchdogSec: NOTIFY_SOCKET names a datagram socket, READY=1 comes
// once it serves, keep-alives follow, and SIGTERM brings STOPPING=1 and a
// clean exit with nothing sent after STOPPING=1.
func TestSystemdNotifyBinary(t *testing.T) {
	path, next := notifySocket(t)
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "200000") // keep-alives every 100ms
	t.Setenv("WATCHDOG_PID", "")        // the child's pid is not known before it starts

	n := startSlicerd(t, "sd1", "--data-dir", t.TempDir())
	if m, want := next("READY=1"), "READY=1\nSTATUS=serving assigner,distributor,backup on "+n.rpcAddr; m != want {
		t.Fatalf("first notification %q; want %q", m, want)
	}
	n.waitLine(10*time.Second, `"msg":"slicerd ready"`) // logged before READY=1 went
	for i := range 2 {
		if m := next("WATCHDOG=1"); m != "WATCHDOG=1" {
			t.Fatalf("notification %d after READY=1 is %q; want WATCHDOG=1", i+1, m)
		}
	}

	n.signal(syscall.SIGTERM)
	for m := next("STOPPING=1"); !strings.HasPrefix(m, "STOPPING=1\n"); m = next("STOPPING=1") {
		if m != "WATCHDOG=1" {
			t.Fatalf("got %q while waiting for STOPPING=1", m)
		}
	}
	if code := n.wait(30 * time.Second); code != 0 {
		t.Fatalf("slicerd exited %d after SIGTERM", code)
	}
	// Datagrams keep their order: once the test's own marker arrives,
	// everything slicerd sent has.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Write([]byte("TEST_END=1"))
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	for m := next("the end marker"); m != "TEST_END=1"; m = next("the end marker") {
		t.Errorf("notification after STOPPING=1: %q", m)
	}
}

// TestSystemdUnitsVerify runs systemd-analyze verify on every unit in
// dist/systemd. verify checks that ExecStart's binary exists, so each unit
// is verified as a copy whose ExecStart is the binary built for these
// tests; nothing else in it changes. verify exits 0 even for unknown keys
// and values it ignores, so any output at all fails the test.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not on PATH, so the units in dist/systemd are not verified (Debian and Ubuntu: apt-get install systemd)")
	}
	units, err := filepath.Glob("../dist/systemd/*.service")
	if err != nil || len(units) == 0 {
		t.Fatalf("no units in ../dist/systemd: %v", err)
	}
	dir := t.TempDir()
	// ExecStart runs the binary, alone or with a command (the sidecar).
	const execStart = "ExecStart=/usr/local/bin/slicerd"
	for _, unit := range units {
		name := filepath.Base(unit)
		b, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, want := range []string{"\nType=notify\n", "\nNotifyAccess=main\n", "\nWatchdogSec=", "\nTimeoutStartSec=", "\nTimeoutStopSec=", "\n" + execStart} {
			if want == "\n"+execStart {
				n := strings.Count(text, want+"\n") + strings.Count(text, want+" ")
				if n != 1 {
					t.Errorf("%s: %d lines %q or %q followed by a command; want one", name, n, execStart, execStart)
				}
				continue
			}
			if strings.Count(text, want) != 1 {
				t.Errorf("%s: %d lines starting %q; want one", name, strings.Count(text, want), strings.TrimSpace(want))
			}
		}
		verified := name
		if strings.Contains(name, "@.") {
			// A template (the sidecar's, bound to an application's unit) is
			// verified as an instance, beside a stub of that unit.
			verified = strings.Replace(name, "@.", "@app.", 1)
			stub := "[Unit]\nDescription=an application\n[Service]\nExecStart=" + bin.slicerd + " version\n"
			if err := os.WriteFile(filepath.Join(dir, "app.service"), []byte(stub), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		copied := filepath.Join(dir, verified)
		text = strings.Replace(text, execStart, "ExecStart="+bin.slicerd, 1)
		if err := os.WriteFile(copied, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(analyze, "verify", copied)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		ours, host := unitLines(string(out), verified)
		if host != "" {
			t.Logf("systemd-analyze verify %s printed about other units or this machine (not failed):\n%s", name, host)
		}
		if err != nil || ours != "" {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, ours)
		}
	}
}

// unitLines splits what systemd-analyze verify printed into the lines
// naming the unit and the others. verify also loads the units ours
// depend on and warns about this machine's own unit files (a unit in
// /lib/systemd/system with a deprecated key, say), or about the machine
// itself (a container without its own control group); those say nothing
// about dist/systemd. Every message about a unit names it.
func unitLines(out, name string) (ours, others string) {
	var o, h strings.Builder
	for line := range strings.Lines(out) {
		if strings.Contains(line, name) {
			o.WriteString(line)
		} else {
			h.WriteString(line)
		}
	}
	return o.String(), h.String()
}

func TestUnitLines(t *testing.T) {
	out := "/lib/systemd/system/plymouth-start.service:23: Unit configured to use KillMode=none. This is unsafe.\n" +
		"/tmp/x/slicerd-agent.service:7: Unknown key name 'Foo' in section 'Service', ignoring.\n" +
		"slicerd-agent.service: Command /nope is not executable: No such file or directory\n" +
		"Failed to create /init.scope control group: Read-only file system\n"
	ours, host := unitLines(out, "slicerd-agent.service")
	wantOurs := "/tmp/x/slicerd-agent.service:7: Unknown key name 'Foo' in section 'Service', ignoring.\n" +
		"slicerd-agent.service: Command /nope is not executable: No such file or directory\n"
	if ours != wantOurs {
		t.Errorf("ours = %q; want %q", ours, wantOurs)
	}
	if want := "/lib/systemd/system/plymouth-start.service:23: Unit configured to use KillMode=none. This is unsafe.\n" +
		"Failed to create /init.scope control group: Read-only file system\n"; host != want {
		t.Errorf("host = %q; want %q", host, want)
	}
}
