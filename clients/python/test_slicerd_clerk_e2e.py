"""End-to-end test of slicerd_clerk against the real binaries: one
slicerd node and three kvserver tasks of job kv (scripts/test.sh builds
them and sets SLICERD_BIN and SLICERD_KVSERVER_BIN)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import slicerd_clerk

SLICERD = os.environ.get("SLICERD_BIN")
KVSERVER = os.environ.get("SLICERD_KVSERVER_BIN")


def free_addr():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % s.getsockname()[1]


class Proc:
    """A started process whose output lines are collected."""

    def __init__(self, args):
        env = dict(os.environ, SLICERD_LOG_FORMAT="json")
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        self.lines, self.cond = [], threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()

    def wait_line(self, text, timeout=30):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self.p.poll() is not None and not self.reader.is_alive():
                    raise AssertionError(f"no line with {text!r}; output:\n{''.join(self.lines[-30:])}")
                self.cond.wait(min(left, 0.5))

    def kill(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
        self.p.wait(10)
        self.reader.join(10)
        self.p.stdout.close()


def until(what, cond, timeout=60):
    deadline = time.monotonic() + timeout
    ev = threading.Event()
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        ev.wait(0.05)


@unittest.skipUnless((SLICERD and KVSERVER) or os.environ.get("CI"),
                     "SLICERD_BIN and SLICERD_KVSERVER_BIN are not set (scripts/test.sh sets them)")
class EndToEndTest(unittest.TestCase):
    def setUp(self):
        self.assertTrue(SLICERD and KVSERVER, "SLICERD_BIN and SLICERD_KVSERVER_BIN must be set in CI")
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.procs = []
        self.addCleanup(lambda: [p.kill() for p in self.procs])

    def start(self, args):
        p = Proc(args)
        self.procs.append(p)
        return p

    def start_slicerd(self, rpc, gossip):
        p = self.start([SLICERD, "--node-name", "node-1", "--rpc-addr", rpc, "--gossip-addr", gossip,
                        "--gossip-profile", "local", "--rebalance-delay", "100ms", "--startup-grace", "300ms",
                        "--data-dir", self.dir, "--log-format", "json"])
        rec = json.loads(p.wait_line('"msg":"slicerd started"'))
        return p, rec["rpc_addr"], rec["gossip_addr"]

    def test_clerk_follows_failures_and_restarts(self):
        node, rpc, gossip = self.start_slicerd(free_addr(), free_addr())
        tasks = {}
        for i in range(3):
            name = f"kv-{i}"
            p = self.start([KVSERVER, "-job", "kv", "-task", name, "-addr", "127.0.0.1:0", "-gossip-addr", "127.0.0.1:0",
                            "-gossip-profile", "local", "-join", gossip])
            line = p.wait_line("kvserver task=" + name)
            addr = [f[5:] for f in line.split() if f.startswith("addr=")][0]
            tasks[name] = (p, addr)
        installed = []
        ck = slicerd_clerk.Clerk("kv", [rpc], min_backoff=0.05, max_backoff=0.5,
                                 on_assignment=lambda prev, a: installed.append(a.version)).start()
        self.addCleanup(ck.close)
        keys = [f"key-{i}" for i in range(1000)]
        live = dict((n, a) for n, (p, a) in tasks.items())

        def all_live():
            a = ck.assignment
            if a is None or {t.name for t in a.tasks} != set(live):
                return False
            return all(t.name in live and t.address == live[t.name] for k in keys for t in ck.tasks(k))

        until("all three tasks in the assignment and every key on a live task", all_live)
        killed = "kv-1"
        tasks[killed][0].kill()
        del live[killed]
        until("an assignment without the killed task", all_live)

        node.kill()
        held = ck.assignment
        for k in keys:
            self.assertIn(ck.lookup(k).name, live)  # routing by the held assignment while slicerd is down
        self.assertIs(ck.assignment, held)

        node, _, _ = self.start_slicerd(rpc, gossip)
        # A task that joins after the restart shows the Clerk streams again.
        p = self.start([KVSERVER, "-job", "kv", "-task", "kv-3", "-addr", "127.0.0.1:0", "-gossip-addr", "127.0.0.1:0",
                        "-gossip-profile", "local", "-join", gossip])
        line = p.wait_line("kvserver task=kv-3")
        live["kv-3"] = [f[5:] for f in line.split() if f.startswith("addr=")][0]
        until("the Clerk to resume after slicerd restarted and route to the new task", all_live, timeout=90)
        for (inc, gen), (inc2, gen2) in zip(installed, installed[1:]):
            self.assertTrue(inc2 != inc or gen2 > gen, f"installed {installed}: a generation twice or out of order")


if __name__ == "__main__":
    unittest.main()
