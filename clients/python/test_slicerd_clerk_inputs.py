"""Tests of the arguments slicerd_clerk takes: a wrong one is refused up
front with a clear error, never left to fail later where nobody sees it."""

import logging
import os
import tempfile
import threading
import time
import unittest

import slicerd_clerk
from slicerd_clerk import cachefile

# The tests' Clerks log what they are made to go through; nobody reads it.
QUIET = logging.getLogger("slicerd_clerk.test.quiet")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False
from slicerd_clerk.assignment import Assignment, Slice, Task, KEY_SPACE_END


class LookupExcludeTest(unittest.TestCase):
    def test_exclude_given_as_one_name(self):
        # A key on two replicas; the caller excludes the one that failed,
        # passing its name alone, where the README writes
        # exclude=["kv-1"]. Taken as an iterable, the string would be the
        # names 'k', 'v', '-', '1', and kv-1 would stay eligible.
        a = Assignment("kv", 1, "inc", [Task("kv-0", "10.0.0.1:1"), Task("kv-1", "10.0.0.2:1")],
                       [Slice(0, KEY_SPACE_END, ("kv-0", "kv-1"))])
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "kv.cache")
            cachefile.write(path, a)
            ck = slicerd_clerk.Clerk("kv", ["127.0.0.1:1"], cache_file=path)
        try:
            got = {ck.lookup("user:42", exclude="kv-1").name for _ in range(200)}
        except TypeError:
            return  # refused, as the TypeScript Clerk refuses skip given as a string
        self.assertEqual(got, {"kv-0"}, "lookup(key, exclude='kv-1') still routes to kv-1")


class TokenTest(unittest.TestCase):
    def test_token_the_constructor_accepts_does_not_kill_the_thread(self):
        # A token read from a file with CRLF line ends keeps its "\r"
        # after rstrip("\n"); gRPC refuses such metadata at the first
        # call. Either the constructor refuses it, or the Clerk's thread
        # lives on.
        for tok in ("secret\r", "sécret"):
            try:
                ck = slicerd_clerk.Clerk("kv", ["127.0.0.1:1"], token=tok, min_backoff=0.01, max_backoff=0.02,
                                         logger=QUIET)
            except ValueError:
                continue  # refused up front
            old = threading.excepthook
            died = []
            threading.excepthook = lambda args: died.append(args.exc_value)
            try:
                ck.start()
                time.sleep(1.0)  # the thread's first calls, not a wait for an event
                alive = ck._thread.is_alive()
            finally:
                ck.close()
                threading.excepthook = old
            self.assertTrue(alive, f"token {tok!r}: accepted by Clerk(), then the Clerk's thread died: {died!r}")


class RunTest(unittest.TestCase):
    def test_an_unexpected_failure_does_not_end_the_thread(self):
        # The Clerk's one thread outlives a failure no server answer
        # explains (here: the first round raises), and keeps retrying.
        ck = slicerd_clerk.Clerk("kv", ["127.0.0.1:1"], min_backoff=0.01, max_backoff=0.02,
                                 logger=QUIET)
        rounds = []
        real = ck._round

        def round_once_broken(*args):
            rounds.append(1)
            if len(rounds) == 1:
                raise ValueError("broken")
            return real(*args)

        ck._round = round_once_broken
        ck.start()
        try:
            deadline = time.monotonic() + 10
            while len(rounds) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)  # polling the rounds, not a wait for one event
            self.assertTrue(ck._thread.is_alive(), "the Clerk's thread ended at an unexpected failure")
            self.assertGreaterEqual(len(rounds), 3, "the Clerk stopped retrying after an unexpected failure")
        finally:
            ck.close()


if __name__ == "__main__":
    unittest.main()
