// Package netbed is a test bed of Linux network namespaces for slicerd's
// partition tests: a few hosts, each a namespace with loopback and one
// veth to a bridge, and the bridge in a namespace of its own (the
// "switch"), so the root namespace's networking is never touched.
// Partitions are real: blackhole routes on one side or both (Block,
// Partition) or a host's switch port taken down (LinkDown), healed by
// removing them (Heal, LinkUp), as etcd's and Jepsen's test beds do.
//
// A bed's namespaces are named PREFIX-PID-NAME after the process that
// created them; New first removes the namespaces, and the processes in
// them, of any earlier bed whose creator is dead, and Close removes its
// own, killing what still runs in them. Each host's address is in a /24 of
// 198.18.0.0/15 (RFC 2544's benchmarking range) picked from the pid; the
// beds of two runs could share a /24 without harm, since each has its own
// switch.
//
// Programs run on a host with Host.Command (ip netns exec). The test's
// own process reaches the hosts with Host.DialContext and Host.Listen,
// which open the socket on a thread moved into the host's namespace: a
// socket keeps the namespace it was opened in, so a Clerk or an HTTP
// client in the test process is then, on the network, a client on that
// host.
//
// It needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the ip command of
// iproute2; Available says what is missing.
package netbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPrefix starts the names of a bed's namespaces.
const DefaultPrefix = "slicerd-netbed"

// netnsDir is where ip netns keeps its named namespaces.
const netnsDir = "/run/netns"

// Available reports what the bed needs and this machine lacks: root and
// the ip command.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netbed: network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); run the test as root, as CI does")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("netbed: the ip command (iproute2) is not installed; apt-get install iproute2")
	}
	return nil
}

// Bed is a set of hosts on one switch.
type Bed struct {
	prefix string // PREFIX-PID-
	sw     string // the switch's namespace
	net    netip.Prefix
	Hosts  []*Host

	mu     sync.Mutex
	cmds   []*exec.Cmd     // made by Host.Command, killed by Close
	blocks map[[2]int]bool // (from, to) host indexes with a blackhole route
	down   map[int]bool    // hosts whose switch port is down
	closed bool
}

// Host is one namespace on the bed.
type Host struct {
	Name string     // as given to New
	NS   string     // the namespace's name, for ip netns
	Addr netip.Addr // its address on the switch
	i    int
	bed  *Bed
}

// New creates a bed of hosts with the given names (short, distinct, of
// letters and digits), after removing the namespaces of dead earlier beds
// with prefix (DefaultPrefix when empty). On error it removes what it
// created.
func New(ctx context.Context, prefix string, names ...string) (*Bed, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if len(names) == 0 || len(names) > 250 {
		return nil, fmt.Errorf("netbed: %d hosts; a bed has 1 to 250", len(names))
	}
	for i, n := range names {
		if n == "" || n == "sw" || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789") != "" || len(n) > 12 || slices.Contains(names[:i], n) {
			return nil, fmt.Errorf("netbed: host name %q: use up to 12 lower-case letters and digits, distinct, not \"sw\"", n)
		}
	}
	if err := Sweep(ctx, prefix); err != nil {
		return nil, err
	}
	pid := os.Getpid()
	base := netip.AddrFrom4([4]byte{198, 18 + byte(pid/256%2), byte(pid % 256), 0})
	b := &Bed{prefix: fmt.Sprintf("%s-%d-", prefix, pid), net: netip.PrefixFrom(base, 24),
		blocks: map[[2]int]bool{}, down: map[int]bool{}}
	b.sw = b.prefix + "sw"
	if err := b.create(ctx, names); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Bed) create(ctx context.Context, names []string) error {
	if err := ip(ctx, "netns", "add", b.sw); err != nil {
		return err
	}
	if err := ipBatch(ctx, b.sw, "link add br0 type bridge", "link set br0 up", "link set lo up"); err != nil {
		return err
	}
	addr := b.net.Addr()
	for i, n := range names {
		addr = addr.Next()
		h := &Host{Name: n, NS: b.prefix + n, Addr: addr, i: i, bed: b}
		b.Hosts = append(b.Hosts, h)
		if err := ip(ctx, "netns", "add", h.NS); err != nil {
			return err
		}
		if err := ipBatch(ctx, b.sw,
			fmt.Sprintf("link add name %s type veth peer name eth0 netns %s", n, h.NS),
			fmt.Sprintf("link set dev %s master br0", n),
			fmt.Sprintf("link set dev %s up", n)); err != nil {
			return err
		}
		if err := ipBatch(ctx, h.NS, "link set lo up",
			fmt.Sprintf("addr add %s/%d dev eth0", h.Addr, b.net.Bits()),
			"link set eth0 up"); err != nil {
			return err
		}
	}
	return nil
}

// Prefix is the network the hosts' addresses are in.
func (b *Bed) Prefix() netip.Prefix { return b.net }

// Host returns the host named name, or nil.
func (b *Bed) Host(name string) *Host {
	for _, h := range b.Hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// Block makes every host of from unable to send to every host of to: a
// blackhole route on each host of from. The other direction is left as it
// is, so alone it is a one-way partition.
func (b *Bed) Block(ctx context.Context, from, to []*Host) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range from {
		var cmds []string
		for _, t := range to {
			if f == t || b.blocks[[2]int{f.i, t.i}] {
				continue
			}
			cmds = append(cmds, fmt.Sprintf("route add blackhole %s/32", t.Addr))
		}
		if len(cmds) == 0 {
			continue
		}
		if err := ipBatch(ctx, f.NS, cmds...); err != nil {
			return err
		}
		for _, t := range to {
			if f != t {
				b.blocks[[2]int{f.i, t.i}] = true
			}
		}
	}
	return nil
}

// Partition cuts a from b both ways: blackhole routes on both sides.
func (b *Bed) Partition(ctx context.Context, a, c []*Host) error {
	if err := b.Block(ctx, a, c); err != nil {
		return err
	}
	return b.Block(ctx, c, a)
}

// Isolate partitions group from every other host.
func (b *Bed) Isolate(ctx context.Context, group ...*Host) error {
	return b.Partition(ctx, group, b.Others(group...))
}

// Others returns the hosts not in group.
func (b *Bed) Others(group ...*Host) []*Host {
	var rest []*Host
	for _, h := range b.Hosts {
		if !slices.Contains(group, h) {
			rest = append(rest, h)
		}
	}
	return rest
}

// LinkDown takes h's port on the switch down: h reaches no other host, and
// no other host reaches it, until LinkUp.
func (b *Bed) LinkDown(ctx context.Context, h *Host) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := ip(ctx, "-n", b.sw, "link", "set", "dev", h.Name, "down"); err != nil {
		return err
	}
	b.down[h.i] = true
	return nil
}

// LinkUp brings h's switch port up again.
func (b *Bed) LinkUp(ctx context.Context, h *Host) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.portUp(ctx, h); err != nil {
		return err
	}
	delete(b.down, h.i)
	return nil
}

// portUp brings h's switch port up and waits until h's side of the veth
// has its carrier again.
func (b *Bed) portUp(ctx context.Context, h *Host) error {
	if err := ip(ctx, "-n", b.sw, "link", "set", "dev", h.Name, "up"); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, "ip", "-n", h.NS, "-o", "link", "show", "dev", "eth0").Output()
		if err == nil && bytes.Contains(out, []byte("LOWER_UP")) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netbed: %s's link has no carrier 5s after its switch port came up: %s", h.Name, bytes.TrimSpace(out))
		}
		t := time.NewTimer(10 * time.Millisecond) // polling the link's state
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Heal removes every blackhole route and brings every switch port up.
func (b *Bed) Heal(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	byHost := map[int][]string{}
	for k := range b.blocks {
		byHost[k[0]] = append(byHost[k[0]], fmt.Sprintf("route del blackhole %s/32", b.Hosts[k[1]].Addr))
	}
	for i, cmds := range byHost {
		if err := ipBatch(ctx, b.Hosts[i].NS, cmds...); err != nil {
			errs = append(errs, err)
			continue
		}
		for k := range b.blocks {
			if k[0] == i {
				delete(b.blocks, k)
			}
		}
	}
	for i := range b.down {
		if err := b.portUp(ctx, b.Hosts[i]); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(b.down, i)
	}
	return errors.Join(errs...)
}

// Close kills every process left in the bed's namespaces and removes them.
// It is safe to call more than once.
func (b *Bed) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	cmds := b.cmds
	b.mu.Unlock()
	// A command started a moment ago may not be in its namespace yet
	// (ip netns exec enters it after the fork), where the sweep below
	// would miss it and leave it running in a namespace nobody names:
	// kill the commands by pid first.
	for _, cmd := range cmds {
		if cmd.Process != nil {
			cmd.Process.Kill()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, h := range b.Hosts {
		errs = append(errs, remove(ctx, h.NS))
	}
	errs = append(errs, remove(ctx, b.sw))
	return errors.Join(errs...)
}

// Sweep removes the namespaces of the beds with prefix whose creating
// process is dead, killing the processes still in them.
func Sweep(ctx context.Context, prefix string) error {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("netbed: list namespaces: %w", err)
	}
	var errs []error
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix+"-")
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || alive(pid) {
			continue
		}
		errs = append(errs, remove(ctx, e.Name()))
	}
	return errors.Join(errs...)
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// remove kills the processes in namespace ns, waits for them to go, and
// deletes it. A namespace already gone is not an error.
func remove(ctx context.Context, ns string) error {
	if _, err := os.Stat(netnsDir + "/" + ns); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for {
		out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		if err != nil {
			break // gone, or ip cannot read it: the delete below says
		}
		// Never this process: a thread of it may be in the namespace
		// for a moment (Host.in).
		pids := slices.DeleteFunc(strings.Fields(string(out)), func(p string) bool { return p == strconv.Itoa(os.Getpid()) })
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		t := time.NewTimer(20 * time.Millisecond) // polling for the kills to land
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("netbed: processes in %s did not die: %w", ns, ctx.Err())
		case <-t.C:
		}
	}
	return ip(ctx, "netns", "del", ns)
}

// Command returns a command that runs name with args on h (ip netns exec,
// which executes the program in place: the command's pid is the
// program's). Close kills it if it still runs; start it before Close,
// not concurrently.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
	h.bed.mu.Lock()
	h.bed.cmds = append(h.bed.cmds, cmd)
	h.bed.mu.Unlock()
	return cmd
}

// String is the host's name.
func (h *Host) String() string { return h.Name }

// AddrPort is h's address with port.
func (h *Host) AddrPort(port uint16) string {
	return netip.AddrPortFrom(h.Addr, port).String()
}

// DialContext connects from h, as net.Dialer.DialContext does; use it as
// an http.Transport's DialContext to be a client on h.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.in(func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Second}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens on h, as net.Listen does.
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := h.in(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// in runs f on an OS thread moved into h's namespace and moved back
// afterwards. A thread that cannot be moved back stays locked and ends
// with the goroutine, so no other goroutine ever runs in the namespace.
func (h *Host) in(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netbed: open this thread's namespace: %w", err)
			return
		}
		defer unix.Close(own)
		fd, err := unix.Open(netnsDir+"/"+h.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netbed: open namespace of %s: %w", h.Name, err)
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("netbed: enter namespace of %s: %w", h.Name, err)
			return
		}
		err = f()
		if unix.Setns(own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// ip runs the ip command.
func ip(ctx context.Context, args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("netbed: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// ipBatch runs ip commands in namespace ns in one process.
func ipBatch(ctx context.Context, ns string, cmds ...string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("netbed: in %s: ip %s: %w: %s", ns, strings.Join(cmds, "; "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
