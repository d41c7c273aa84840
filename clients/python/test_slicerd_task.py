"""Tests of the slicerd_task library that need no sidecar; the end-to-end
test (e2e/sidecarapps_test.go) runs it against a real one."""

import base64
import json
import os
import socket
import tempfile
import threading
import time
import unittest

import slicerd_task


class SliceKeyTest(unittest.TestCase):
    # api/conformance/hash.json: the slice keys every client must compute
    # (docs/client-contract.md); the Go Clerk's tests check the same file.
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "api", "conformance", "hash.json")) as f:
        VECTORS = [(base64.b64decode(c["key"]), int(c["slice_key"])) for c in json.load(f)["cases"]]

    def test_vectors(self):
        for key, want in self.VECTORS:
            self.assertEqual(slicerd_task.slice_key(key), want, key)

    def test_str_is_utf8(self):
        self.assertEqual(slicerd_task.slice_key("user:42"), slicerd_task.slice_key(b"user:42"))

    def test_owns_from_ranges(self):
        t = slicerd_task.Task("/nonexistent")
        self.assertFalse(t.owns("a"))
        h = slicerd_task.slice_key("a")
        t._apply({"generation": "3", "owned": [{"start": "0", "end": str(h)}, {"start": str(h), "end": str(h + 1)}]})
        self.assertTrue(t.owns("a"))
        self.assertEqual(t.ranges()[0], 3)
        t._apply({"generation": "4", "owned": [{"start": "0", "end": str(h)}]})
        self.assertFalse(t.owns("a"))

    def test_on_change_across_a_reopened_stream(self):
        # The first message of a stream reopened after the sidecar
        # restarted gains every range held and loses none; on_change
        # still tells what changed since the message before.
        changes = []
        t = slicerd_task.Task("/nonexistent", on_change=lambda g, gained, lost: changes.append((g, gained, lost)))
        t._apply({"generation": "3", "owned": [{"start": "0", "end": "10"}, {"start": "20", "end": "30"}],
                  "gained": [{"start": "0", "end": "10"}, {"start": "20", "end": "30"}]})
        t._apply({"generation": "5", "owned": [{"start": "5", "end": "10"}, {"start": "40", "end": "50"}],
                  "gained": [{"start": "5", "end": "10"}, {"start": "40", "end": "50"}]})
        self.assertEqual(changes[-1], (5, [(40, 50)], [(0, 5), (20, 30)]))

    def test_generation_without_a_change(self):
        # A generation that changes none of the task's ranges moves the
        # generation (wait_generation) without an on_change call.
        calls = []
        t = slicerd_task.Task("/nonexistent", on_change=lambda g, gained, lost: calls.append(g))
        t._apply({"generation": "3", "owned": [{"start": "0", "end": "10"}]})
        t._apply({"generation": "4", "owned": [{"start": "0", "end": "10"}]})
        self.assertTrue(t.wait_generation(4, timeout=0))
        self.assertEqual(calls, [3])

    def test_subtract(self):
        # Every pair of sorted, non-overlapping lists of ranges over [0, 8)
        # of up to two ranges each, against the keys counted one by one.
        spans = [(a, b) for a in range(8) for b in range(a + 1, 9)]
        lists = [[]] + [[r] for r in spans] + [[r, q] for r in spans for q in spans if r[1] <= q[0]]
        keys = lambda rs: {k for s, e in rs for k in range(s, e)}
        for x in lists:
            for y in lists:
                got = slicerd_task._subtract(x, y)
                self.assertEqual(keys(got), keys(x) - keys(y), (x, y))
                self.assertTrue(all(s < e for s, e in got), (x, y, got))


class ConnTest(unittest.TestCase):
    """The unary calls' HTTP/1.1 reading, against canned answers of the
    shapes Go's server writes: a sized body, a chunked one, an error, and
    a connection closed after answering and before a second call."""

    def serve(self, answers):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "s.sock")
        ln = socket.socket(socket.AF_UNIX)
        ln.bind(path)
        ln.listen(4)
        self.addCleanup(ln.close)
        self.requests = []

        def run():
            for conn_answers in answers:
                c, _ = ln.accept()
                f = c.makefile("rb")
                for a in conn_answers:
                    head = b""
                    while not head.endswith(b"\r\n\r\n"):
                        head += f.read(1)
                    n = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")][0].split(b":")[1])
                    self.requests.append(head.split(b" ")[1].decode() + " " + f.read(n).decode())
                    if isinstance(a, tuple):  # (seconds held, answer)
                        time.sleep(a[0])
                        a = a[1]
                    c.sendall(a)
                f.close()
                c.close()

        threading.Thread(target=run, daemon=True).start()
        return path

    def test_sized_chunked_error_and_closed(self):
        sized = b'{"handle":"7","owned":true,"token":"12","validForNs":"1500000000"}'
        chunked = b'{"continuous":true}'
        err = b'{"code":"resource_exhausted","message":"full"}'
        path = self.serve([
            [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(sized), sized),
             b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(chunked), chunked),
             b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: %d\r\n\r\n%s" % (len(err), err)],
            # A second connection: the first was closed by the server
            # after its third answer, and the next call reconnects.
            [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"],
        ])
        t = slicerd_task.Task(path)
        h = t.acquire("user:42")
        self.assertEqual((h.id, h.owned, h.token), (7, True, 12))
        self.assertIsNotNone(h.deadline)
        self.assertTrue(h.release())
        self.assertTrue(h.release())  # once only: no second call
        with self.assertRaises(slicerd_task.LocalAPIError) as cm:
            t.acquire(b"x")
        self.assertEqual(cm.exception.code, "resource_exhausted")
        t.report_load([])
        self.assertEqual([r.split(" ")[0] for r in self.requests],
                         ["/slicer.v1.SidecarService/AcquireHandle", "/slicer.v1.SidecarService/ReleaseHandle",
                          "/slicer.v1.SidecarService/AcquireHandle", "/slicer.v1.SidecarService/ReportLoad"])
        self.assertIn('"handle": 7', self.requests[1])

    def test_a_wait_extends_the_timeout(self):
        # The sidecar may hold an acquire for its wait: the call's timeout
        # is the library's plus the wait, so an answer within both is read.
        owned = b'{"handle":"7","owned":true,"token":"12","validForNs":"1500000000"}'
        ok = lambda b: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b)
        path = self.serve([[(0.4, ok(owned)), (0.4, ok(b'{"done":true}'))]])
        t = slicerd_task.Task(path, timeout=0.2)
        self.addCleanup(t.close)
        self.assertTrue(t.acquire("user:42", wait=0.5).owned)
        self.assertTrue(t.await_state("user:42", wait=0.5))

    def test_held_release_is_not_waited_for(self):
        held = b'{"handle":"7","owned":true,"token":"12","validForNs":"1500000000","heldForNs":"1000000000"}'
        short = b'{"handle":"8","owned":true,"token":"12","validForNs":"1500000000","heldForNs":"1"}'
        cont = b'{"continuous":false}'
        ok = lambda b: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b)
        path = self.serve([[ok(held), ok(b"{}"), ok(short), ok(cont), ok(b"{}")]])
        t = slicerd_task.Task(path)
        self.addCleanup(t.close)
        h = t.acquire("user:42")
        self.assertIsNotNone(h.held_until)
        self.assertTrue(h.kept())  # from memory: no call
        self.assertTrue(h.release())  # sent; its answer is read by the next call
        # A promise that has passed: kept() and release() ask the sidecar.
        h2 = t.acquire("user:43")  # reads the release's answer, then its own
        self.assertEqual(h2.id, 8)
        time.sleep(0.001)
        self.assertFalse(h2.release())
        t.report_load([])
        self.assertEqual([r.split(" ")[0] for r in self.requests],
                         ["/slicer.v1.SidecarService/AcquireHandle", "/slicer.v1.SidecarService/ReleaseHandle",
                          "/slicer.v1.SidecarService/AcquireHandle", "/slicer.v1.SidecarService/ReleaseHandle",
                          "/slicer.v1.SidecarService/ReportLoad"])


if __name__ == "__main__":
    unittest.main()
