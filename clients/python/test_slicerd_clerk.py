"""Tests of the slicerd_clerk package: the conformance vectors of
api/conformance (hash, lookup, and the streams played from a real gRPC
server), and the subsets and cache file against values of the Go code."""

import base64
import json
import os
import queue
import tempfile
import threading
import time
import unittest
from concurrent import futures

import grpc
from google.protobuf import json_format

import slicerd_clerk
from slicerd_clerk import _messages, cachefile

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "..", "api", "conformance")


def load(name):
    with open(os.path.join(VECTORS, name)) as f:
        return json.load(f)


class HashTest(unittest.TestCase):
    def test_vectors(self):
        for c in load("hash.json")["cases"]:
            key = base64.b64decode(c["key"])
            self.assertEqual(slicerd_clerk.slice_key(key), int(c["slice_key"]), key)
            if "text" in c:
                self.assertEqual(slicerd_clerk.slice_key(c["text"]), int(c["slice_key"]))


class LookupTest(unittest.TestCase):
    def test_vectors(self):
        for c in load("lookup.json")["cases"]:
            a = slicerd_clerk.Assignment.from_proto(json_format.ParseDict(c["assignment"], _messages.Assignment()))
            for lk in c["lookups"]:
                sk = int(lk["slice_key"])
                if "key" in lk:
                    self.assertEqual(slicerd_clerk.slice_key(base64.b64decode(lk["key"])), sk)
                tasks = a.route_slice_key(sk)
                self.assertEqual([t.name for t in tasks], lk["tasks"], (c["name"], sk))
                self.assertEqual([t.address for t in tasks], lk["addresses"], (c["name"], sk))

    def test_invalid_refused(self):
        T = slicerd_clerk.Task
        S = slicerd_clerk.Slice
        for slices, tasks in (
                ([S(0, 5, ("a",))], [T("a", "x:1")]),  # gap at the end
                ([S(0, 1 << 63, ("b",))], [T("a", "x:1")]),  # unknown task
                ([S(0, 1 << 63, ("a",))], [T("b", "x:1"), T("a", "x:1")])):  # unsorted
            with self.assertRaises(slicerd_clerk.InvalidAssignment):
                slicerd_clerk.Assignment("kv", 1, "i", tasks, slices)


class SubsetTest(unittest.TestCase):
    def test_vectors(self):
        subsets = load("subset.json")
        for c in subsets["rocksteadier"]:
            self.assertEqual(slicerd_clerk.rocksteadier(int(c["frontend"]), c["n"], c["k"]), c["order"], c)
        for c in subsets["frontend_index"]:
            self.assertEqual(slicerd_clerk.frontend_index(c["id"]), int(c["frontend"]))
        for c in load("preferred.json")["cases"]:
            pref, _ = slicerd_clerk.preferred(int(c["frontend"]), c["k"], c["live"], c["down"] or ())
            self.assertEqual(pref, c["preferred"], c)


class CacheFileTest(unittest.TestCase):
    def test_go_file(self):
        c = load("cachefile.json")
        data = base64.b64decode(c["bytes"])
        a = cachefile.decode(data)
        self.assertEqual((a.job, a.generation, a.incarnation), (c["job"], int(c["generation"]), c["incarnation"]))
        self.assertEqual(cachefile.encode(a), data)
        for bad in (data[:-1], data[:10], data[:30] + b"\x00" + data[31:]):
            with self.assertRaises(cachefile.CacheFileError):
                cachefile.decode(bad)

    def test_clerk_routes_from_cache_and_ignores_damage(self):
        a = cachefile.decode(base64.b64decode(load("cachefile.json")["bytes"]))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kv.cache")
            cachefile.write(path, a)
            ck = slicerd_clerk.Clerk("kv", ["127.0.0.1:1"], cache_file=path)
            self.assertEqual(ck.generation, 7)
            self.assertIn(ck.lookup("k").name, ("kv-0", "kv-1"))
            with open(path, "r+b") as f:
                f.truncate(40)
            with self.assertLogs("slicerd_clerk", "WARNING"):
                ck = slicerd_clerk.Clerk("kv", ["127.0.0.1:1"], cache_file=path)
            self.assertIsNone(ck.assignment)


class ArgsTest(unittest.TestCase):
    def test_bad_arguments(self):
        for kw in ({"job": "Bad Job", "distributors": ["a:1"]}, {"job": "kv"}, {"job": "kv", "distributors": "a:1"},
                   {"job": "kv", "distributors": ["nohost"]}, {"job": "kv", "distributors": ["a:1"], "min_backoff": 0},
                   {"job": "kv", "distributors": ["a:1"], "subset_size": -1}):
            with self.assertRaises((ValueError, TypeError), msg=kw):
                slicerd_clerk.Clerk(**kw)
        with self.assertRaises(slicerd_clerk.NoAssignment):
            slicerd_clerk.Clerk("kv", ["a:1"]).lookup("k")


class _Watching(grpc.GenericRpcHandler):
    """Serves DistributorService.WatchAssignment with self.watch."""

    def service(self, details):
        if details.method != "/slicer.v1.DistributorService/WatchAssignment":
            return None
        return grpc.unary_stream_rpc_method_handler(
            self.watch, request_deserializer=_messages.WatchAssignmentRequest.FromString,
            response_serializer=_messages.WatchAssignmentResponse.SerializeToString)


class Scripted(_Watching):
    """A DistributorService that sends each WatchAssignment call the next
    stream of a script, ending it with UNAVAILABLE, and records the
    requests. Stream i starts only once go[i] is set, so that the test
    reads what the client holds before the next stream changes it."""

    def __init__(self, streams):
        self.streams = streams
        self.requests = queue.Queue()
        self.go = [threading.Event() for _ in streams]
        self.next = 0

    def watch(self, req, context):
        self.requests.put(req)
        if self.next >= len(self.streams):
            done = threading.Event()
            context.add_callback(done.set)
            done.wait(60)
            return
        i = self.next
        self.next += 1
        if not self.go[i].wait(30):
            return
        for m in self.streams[i]:
            yield m
        context.abort(grpc.StatusCode.UNAVAILABLE, "the stream ends; watch again")


def serve(handler):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


class StreamConformanceTest(unittest.TestCase):
    def test_vectors(self):
        cases = load("stream.json")["cases"]
        self.assertTrue(cases)
        for c in cases:
            with self.subTest(c["name"]):
                streams = [[json_format.ParseDict(m, _messages.WatchAssignmentResponse()) for m in st["messages"]]
                           for st in c["streams"]]
                srv = Scripted(streams)
                server, addr = serve(srv)
                ck = slicerd_clerk.Clerk("kv", [addr], subset_size=0, min_backoff=0.001, max_backoff=0.005)
                try:
                    ck.start()
                    first = srv.requests.get(timeout=30)
                    self.assertEqual((first.known_generation, first.known_incarnation, first.delta_version), (0, "", 1))
                    srv.go[0].set()
                    for i, st in enumerate(c["streams"]):
                        resumed = srv.requests.get(timeout=30)
                        a = ck.assignment
                        got = {"installed_generation": str(a.generation if a else 0),
                               "installed_incarnation": a.incarnation if a else "",
                               "resume_known_generation": str(resumed.known_generation),
                               "resume_known_incarnation": resumed.known_incarnation}
                        self.assertEqual(got, st["then"], f"after stream {i}")
                        if i + 1 < len(srv.go):
                            srv.go[i + 1].set()
                finally:
                    ck.close()
                    server.stop(0)


def _wait_until(cond, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def _whole(generation):
    return json_format.ParseDict({"assignment": {
        "job": "kv", "generation": str(generation), "incarnation": "inc-a",
        "tasks": [{"name": "kv-0", "address": "10.0.0.1:80"}],
        "slices": [{"start": "0", "end": str(1 << 63), "tasks": ["kv-0"]}]}}, _messages.WatchAssignmentResponse())


class Beating(_Watching):
    """A DistributorService whose streams announce heartbeats every
    ``announce`` seconds to a client that asks (none when 0), send the
    generation ``first``, then, to a client that asked, a heartbeat every
    ``beat`` seconds (none when 0), and stay open until the client ends
    them."""

    def __init__(self, announce, first, beat):
        self.announce, self.first, self.beat = announce, first, beat
        self.opens = 0
        self.beats = 0

    def watch(self, req, context):
        self.opens += 1
        asked = ("slicerd-heartbeat", "1") in tuple(context.invocation_metadata())
        if asked and self.announce:
            context.send_initial_metadata((("slicerd-heartbeat-interval", str(int(self.announce * 1000))),))
        yield _whole(self.first)
        done = threading.Event()
        context.add_callback(done.set)
        while not done.is_set():
            if asked and self.beat:
                done.wait(self.beat)
                yield _messages.WatchAssignmentResponse()
                self.beats += 1
            else:
                done.wait(60)


class HeartbeatTest(unittest.TestCase):
    def test_silent_distributor_is_left_for_the_next(self):
        """A Distributor that announced heartbeats and then sends nothing
        while its connection stays up is left for the next server once
        nothing arrived for HEARTBEAT_MISSES intervals."""
        silent = Beating(0.05, 1, 0)
        nxt = Beating(0, 2, 0)
        silent_server, silent_addr = serve(silent)
        next_server, next_addr = serve(nxt)
        # The silent Distributor alone until its stream is open, so the
        # Clerk is on it first.
        ck = slicerd_clerk.Clerk("kv", [silent_addr], subset_size=0, min_backoff=0.005, max_backoff=0.05)
        try:
            ck.start()
            _wait_until(lambda: silent.opens > 0, "a stream on the silent Distributor")
            ck.set_servers([silent_addr, next_addr])
            _wait_until(lambda: ck.generation == 2, "generation 2 from the next Distributor")
        finally:
            ck.close()
            silent_server.stop(0)
            next_server.stop(0)

    def test_heartbeats_keep_an_idle_stream(self):
        """A Distributor that sends heartbeats keeps the stream however
        long no generation goes out."""
        # Heartbeats far more often than announced: the stream is never
        # silent for HEARTBEAT_MISSES intervals, however the test is run.
        srv = Beating(0.2, 1, 0.005)
        server, addr = serve(srv)
        ck = slicerd_clerk.Clerk("kv", [addr], subset_size=0, min_backoff=0.005, max_backoff=0.05)
        try:
            ck.start()
            # Twice HEARTBEAT_MISSES announced intervals at least: one
            # heartbeat per 5 ms or more makes at most 40 in 200 ms.
            want = 2 * slicerd_clerk.clerk.HEARTBEAT_MISSES * 40
            _wait_until(lambda: srv.beats >= want, f"{want} heartbeats")
            self.assertEqual(srv.opens, 1, "the Clerk dropped a stream that sent heartbeats")
            self.assertEqual(ck.generation, 1)
        finally:
            ck.close()
            server.stop(0)


if __name__ == "__main__":
    unittest.main()
