"""The Clerk: one job's assignment, watched from slicerd, and the lookups
that route keys by it (docs/client-contract.md). A port of the Go Clerk
(package clerk) with the same rules, timers and server order."""

import logging
import os
import random
import socket
import threading
import time
from typing import NamedTuple, Optional, Tuple

import grpc

from . import _messages, cachefile
from .assignment import (Assignment, DeltaError, InvalidAssignment, Task, is_reset, receive, slice_key,
                         supersedes, validate_job_name)
from .subset import frontend_index, preferred

__all__ = ["Clerk", "Route", "TLS", "ClerkError", "NoAssignment", "NoReplica", "DEFAULT_SUBSET_SIZE"]

DEFAULT_SUBSET_SIZE = 3
DELTA_VERSION = 1
_DISTRIBUTOR = "/slicer.v1.DistributorService/WatchAssignment"
_BACKUP = "/slicer.v1.BackupService/WatchAssignment"
_MAX_MESSAGE = 1 << 30  # an assignment of 100,000 slices is a few MB
# Heartbeats (docs/api.md, "Heartbeats"): the Clerk asks for them; a server
# that sends them announces their interval in milliseconds, and a stream of
# such a server that brings no message for HEARTBEAT_MISSES intervals is
# dropped for the next server. A server that announces nothing keeps its
# stream as long as it stays open.
_HEARTBEAT_HEADER = "slicerd-heartbeat"
_HEARTBEAT_INTERVAL_HEADER = "slicerd-heartbeat-interval"
HEARTBEAT_MISSES = 4


class ClerkError(Exception):
    """The class of the Clerk's own errors."""


class NoAssignment(ClerkError, LookupError):
    """No assignment is held yet: slicerd has not answered and no cache
    file gave one."""


class NoReplica(ClerkError, LookupError):
    """Every task serving the key has failed (or has no address)."""


class TLS:
    """TLS for the calls to slicerd: the CA that signed slicerd's
    certificates (PEM file; None: the system's roots) and, when slicerd
    asks for one, this client's certificate and key (PEM files).
    ``server_name`` overrides the host name checked in the server's
    certificate (by default the host of the address called). The files are
    read once, here."""

    def __init__(self, ca_file=None, cert_file=None, key_file=None, server_name=None):
        if (cert_file is None) != (key_file is None):
            raise ValueError("slicerd_clerk: TLS: give both cert_file and key_file, or neither")

        def load(path, what):
            if path is None:
                return None
            try:
                with open(path, "rb") as f:
                    return f.read()
            except OSError as e:
                raise ValueError(f"slicerd_clerk: TLS: cannot read the {what} {path!r}: {e}") from None

        self.server_name = server_name
        self._creds = grpc.ssl_channel_credentials(
            root_certificates=load(ca_file, "CA file"),
            private_key=load(key_file, "key file"),
            certificate_chain=load(cert_file, "certificate file"))


class Route:
    """The tasks serving one key under the assignment held when ``route``
    was called: ``slice_key``, ``generation``, ``incarnation`` and
    ``tasks`` (``Task(name, address)`` tuples in the assignment's order).
    ``pick()`` chooses one at random, skipping those ``fail(task)``
    marked, so a caller tries another replica when one fails."""

    __slots__ = ("slice_key", "generation", "incarnation", "tasks", "_failed")

    def __init__(self, sk, a, tasks):
        self.slice_key = sk
        self.generation = a.generation
        self.incarnation = a.incarnation
        self.tasks = tasks
        self._failed = set()

    def pick(self):
        """A ``Task`` chosen uniformly at random among those with an
        address that were not marked failed; NoReplica when none is
        left."""
        live = [t for t in self.tasks if t.address and t.name not in self._failed]
        if not live:
            raise NoReplica(f"slicerd_clerk: every task serving slice key {self.slice_key} failed or has no address: "
                            f"{[t.name for t in self.tasks]}")
        return live[0] if len(live) == 1 else random.choice(live)

    def fail(self, task):
        """Mark a task (a ``Task`` or its name) failed for this route."""
        self._failed.add(task.name if isinstance(task, Task) else task)

    def __repr__(self):
        return f"Route(slice_key={self.slice_key}, generation={self.generation}, tasks={list(self.tasks)})"


class _Target(NamedTuple):
    addr: str
    backup: bool  # a Backup
    fallback: bool  # not preferred: the stream ends after backup_recheck
    pref: Tuple[str, ...]  # the preferred Distributors when planned
    cursor: Optional[str]  # rotation cursor to move past this one
    after: int


class _Rejected(ClerkError):
    """A server sent what this Clerk must not install."""


class Clerk:
    """Follows the assignment of ``job`` from slicerd and routes keys by
    it.

    ``distributors`` and ``backups`` are slicerd RPC addresses
    (``host:port``). The Clerk streams from ``subset_size`` preferred
    Distributors (chosen by Rocksteadier from ``frontend``, or from a hash
    of ``client_id``, by default hostname:pid), then the other
    Distributors, then the Backups; a stream from a server that is not
    preferred ends after ``backup_recheck`` seconds so the Clerk returns to
    its preferred ones. Between rounds in which no server answered it waits
    a random time between half the bound and the bound, the bound doubling
    from ``min_backoff`` to ``max_backoff`` seconds.

    ``cache_file``: a file (its directory must exist) where the newest
    assignment is kept, so that a restarted client routes before slicerd
    answers. ``tls``: a ``TLS``; ``token``: a bearer token sent with every
    call (use it over TLS only). ``on_assignment(prev, new)`` is called
    from the Clerk's thread after every installed assignment (prev None
    the first time); keep it short. ``logger``: a ``logging.Logger``
    (default ``logging.getLogger("slicerd_clerk")``).

    ``start()`` starts the one background thread; ``close()`` stops and
    joins it. Lookups (``lookup``, ``route``, ``tasks``) are safe from any
    thread and never wait on the network: while slicerd is unreachable
    they route by the assignment held."""

    def __init__(self, job, distributors=(), backups=(), *, subset_size=DEFAULT_SUBSET_SIZE, client_id=None,
                 frontend=None, cache_file=None, tls=None, token=None, on_assignment=None,
                 min_backoff=0.1, max_backoff=5.0, backup_recheck=30.0, logger=None):
        if not isinstance(job, str):
            raise TypeError(f"slicerd_clerk: job must be a str, not {type(job).__name__}")
        try:
            validate_job_name(job)
        except InvalidAssignment as e:
            raise ValueError(f"slicerd_clerk: {e}") from None
        distributors, backups = _addresses(distributors, "distributors"), _addresses(backups, "backups")
        if not distributors and not backups:
            raise ValueError(f"slicerd_clerk: job {job!r}: no server address; give the slicerd Distributors' RPC addresses (host:port)")
        for name, v in (("min_backoff", min_backoff), ("max_backoff", max_backoff), ("backup_recheck", backup_recheck)):
            if not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"slicerd_clerk: {name} {v!r} must be a positive number of seconds")
        if max_backoff < min_backoff:
            raise ValueError(f"slicerd_clerk: max_backoff {max_backoff} is below min_backoff {min_backoff}")
        if not isinstance(subset_size, int) or subset_size < 0:
            raise ValueError(f"slicerd_clerk: subset_size {subset_size!r} must be 0 (every Distributor) or positive")
        if frontend is not None and (not isinstance(frontend, int) or not 0 <= frontend < 1 << 64):
            raise ValueError(f"slicerd_clerk: frontend {frontend!r} must be an integer in [0, 2^64)")
        if on_assignment is not None and not callable(on_assignment):
            raise TypeError("slicerd_clerk: on_assignment must be callable")
        if tls is not None and not isinstance(tls, TLS):
            raise TypeError("slicerd_clerk: tls must be a slicerd_clerk.TLS")
        if token is not None and (not isinstance(token, str) or not token
                                  or not all(" " <= c <= "~" for c in token)):
            raise ValueError("slicerd_clerk: token must be a non-empty str of printable ASCII on one line "
                             "(no carriage return or newline)")

        self.job = job
        self._log = logger or logging.getLogger("slicerd_clerk")
        if token is not None and tls is None:
            self._log.warning("slicerd_clerk: job %s: sending a bearer token without TLS; anyone on the path can read it", job)
        self._servers = (distributors, backups, ())
        self._subset_size = subset_size
        if frontend is None:
            frontend = frontend_index(client_id if client_id is not None else f"{socket.gethostname()}:{os.getpid()}")
        self._frontend = frontend
        self._tls = tls
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        self._on_assignment = on_assignment
        self._min_backoff, self._max_backoff, self._recheck = float(min_backoff), float(max_backoff), float(backup_recheck)
        # Rotations start at a random server, so clients that fall back
        # spread out.
        self._cursors = {"dist": random.randrange(1 << 30), "backup": random.randrange(1 << 30)}

        self._lock = threading.Lock()  # guards _call, _target, _moved, _servers, _thread
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._ready = threading.Event()
        self._thread = None
        self._call = None
        self._target = None
        self._moved = False
        self._channels = {}  # owned by the Clerk's thread

        # The assignment lookups route by; replaced whole, never modified.
        self._assignment = None
        # The newest assignment a server sent this process: its version is
        # what the Clerk watches with, and the next delta applies to it.
        # It lags _assignment while that came from the cache file, so the
        # first server answers with its current assignment.
        self._heard = None
        self._cache_file = cache_file
        self._from_cache = None
        if cache_file is not None:
            self._load_cache(cache_file)

    # Lookups.

    @property
    def assignment(self):
        """The assignment held (an ``Assignment``), or None."""
        return self._assignment

    @property
    def generation(self):
        """The held assignment's generation, 0 when none."""
        a = self._assignment
        return a.generation if a is not None else 0

    def route(self, key):
        """The ``Route`` of ``key`` (bytes, or str taken as UTF-8) under the
        held assignment; NoAssignment before the first one."""
        a = self._assignment
        if a is None:
            raise NoAssignment(f"slicerd_clerk: no assignment of job {self.job!r} yet; is slicerd reachable?")
        sk = slice_key(key)
        return Route(sk, a, a.route_slice_key(sk))

    def tasks(self, key):
        """The tasks serving ``key``: ``Task(name, address)`` tuples in the
        assignment's order; NoAssignment before the first assignment."""
        return self.route(key).tasks

    def lookup(self, key, exclude=()):
        """One task serving ``key``, as ``Task(name, address)``, chosen at
        random among the key's replicas, skipping the task names in
        ``exclude`` (those that failed the request). NoAssignment before
        the first assignment, NoReplica when every replica is excluded."""
        if isinstance(exclude, (str, bytes)):
            raise TypeError("slicerd_clerk: exclude is a list of task names, not one string; write exclude=[name]")
        r = self.route(key)
        for name in exclude:
            r.fail(name)
        return r.pick()

    def wait_ready(self, timeout=None):
        """Wait until an assignment is held; True if one is."""
        return self._ready.wait(timeout)

    # Lifecycle.

    def start(self):
        """Start watching; returns self."""
        with self._lock:
            if self._stop.is_set():
                raise ClerkError("slicerd_clerk: the Clerk was closed; create another")
            if self._thread is not None:
                raise ClerkError("slicerd_clerk: start() was called twice")
            self._thread = threading.Thread(target=self._run, name=f"slicerd-clerk-{self.job}", daemon=True)
            self._thread.start()
        return self

    def close(self):
        """Stop watching and wait for the Clerk's thread to end. Lookups
        keep answering from the assignment held. Closing twice is fine."""
        with self._lock:
            self._stop.set()
            self._wake.set()
            if self._call is not None:
                self._call.cancel()
            t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
        return False

    def set_servers(self, distributors, backups=(), down=()):
        """Replace the servers (say, from membership). ``down`` lists
        Distributors known to be down: they keep their place in the
        subsetting order, so only the clients that preferred them move. An
        open stream moves when this client's preferred Distributors change
        and it is not on the first of them; a wait between attempts ends."""
        distributors, backups = _addresses(distributors, "distributors"), _addresses(backups, "backups")
        down = _addresses(down, "down")
        with self._lock:
            self._servers = (distributors, backups, down)
            t = self._target
            if t is not None and self._subset_size > 0:
                pref, _ = preferred(self._frontend, self._subset_size, distributors, down)
                if tuple(pref) != t.pref and not (pref and pref[0] == t.addr):
                    self._log.info("slicerd_clerk: job %s: the Distributors changed; moving the stream from %s to this client's subset %s",
                                   self.job, t.addr, pref)
                    self._moved = True
                    self._call.cancel()
        self._wake.set()

    # The watch.

    def _load_cache(self, path):
        d = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(d) or not os.access(d, os.W_OK | os.X_OK):
            raise ValueError(f"slicerd_clerk: cache file {path!r}: its directory does not exist or is not writable")
        try:
            a = cachefile.read(path, self.job)
        except FileNotFoundError:
            self._log.info("slicerd_clerk: job %s: no assignment cache file %s yet; waiting for slicerd", self.job, path)
            return
        except (OSError, cachefile.CacheFileError) as e:
            self._log.warning("slicerd_clerk: job %s: ignoring the assignment cache file %s (%s); "
                              "fetching the assignment from slicerd, which will overwrite it", self.job, path, e)
            return
        self._assignment = self._from_cache = a
        self._ready.set()
        self._log.info("slicerd_clerk: job %s: routing on the cached assignment (generation %d, incarnation %r) until slicerd answers",
                       self.job, a.generation, a.incarnation)

    def _run(self):
        try:
            a, self._from_cache = self._from_cache, None
            if a is not None and self._assignment is a:
                self._notify(None, a)
            backoff, failing = self._min_backoff, False
            while not self._stop.is_set():
                with self._lock:
                    dists, backups, down = self._servers
                try:
                    ok, err = self._round(dists, backups, down)
                except Exception as e:  # a failure no server answer explains: logged, and retried as one
                    self._log.exception("slicerd_clerk: job %s: watching failed unexpectedly; retrying", self.job)
                    ok, err = False, e
                if self._stop.is_set():
                    break
                if ok:
                    backoff, failing = self._min_backoff, False
                elif not failing and self._assignment is None and _code(err) == grpc.StatusCode.NOT_FOUND:
                    failing = True
                    self._log.info("slicerd_clerk: job %s: slicerd does not know the job yet; retrying until one of its tasks joins",
                                   self.job)
                elif not failing:
                    failing = True
                    self._log.warning("slicerd_clerk: job %s: no slicerd server answered (%s); keeping generation %d and retrying",
                                      self.job, _describe(err), self.generation)
                else:
                    self._log.debug("slicerd_clerk: job %s: retry round failed (%s); backoff %.3fs", self.job, _describe(err), backoff)
                # Always pause a little, even after a healthy stream, so a
                # server that accepts and drops streams cannot make this spin.
                self._wake.wait(backoff / 2 + random.uniform(0, backoff / 2))
                self._wake.clear()
                if not ok:
                    backoff = min(2 * backoff, self._max_backoff)
        finally:
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()

    def _round(self, dists, backups, down):
        """Try the servers in plan order until one gives a healthy stream;
        (True, None), or (False, an error: NOT_FOUND only when every
        server said so)."""
        last = None
        for t in self._plan(dists, backups, down):
            if t.cursor is not None:
                self._cursors[t.cursor] = t.after
            ok, err = self._watch(t)
            if self._stop.is_set():
                return False, None
            if ok:
                return True, None
            if last is None or _code(last) == grpc.StatusCode.NOT_FOUND:
                last = err
            self._log.debug("slicerd_clerk: job %s: server %s (backup %s) did not answer: %s", self.job, t.addr, t.backup, _describe(err))
        return False, last if last is not None else ClerkError("no server address known")

    def _plan(self, dists, backups, down):
        pref, rest = ([], list(dists))
        if self._subset_size > 0 and dists:
            pref, rest = preferred(self._frontend, self._subset_size, dists, down)
        pt = tuple(pref)
        out = [_Target(a, False, False, pt, None, 0) for a in pref]
        for group, addrs, backup in (("dist", rest, False), ("backup", list(backups), True)):
            start = self._cursors[group]
            for k in range(len(addrs)):
                i = (start + k) % len(addrs)
                out.append(_Target(addrs[i], backup, backup or bool(pref), pt, group, i + 1))
        return out

    def _channel(self, addr):
        ch = self._channels.get(addr)
        if ch is None:
            opts = [
                # Reconnect on our own backoff, not grpc's (up to 120 s).
                ("grpc.initial_reconnect_backoff_ms", int(self._min_backoff * 1000)),
                ("grpc.min_reconnect_backoff_ms", int(self._min_backoff * 1000)),
                ("grpc.max_reconnect_backoff_ms", int(self._max_backoff * 1000)),
                ("grpc.use_local_subchannel_pool", 1),
                ("grpc.max_receive_message_length", _MAX_MESSAGE),
                ("grpc.keepalive_time_ms", 30000),
                ("grpc.keepalive_timeout_ms", 10000),
            ]
            if self._tls is None:
                ch = grpc.insecure_channel(addr, options=opts)
            else:
                if self._tls.server_name:
                    opts.append(("grpc.ssl_target_name_override", self._tls.server_name))
                ch = grpc.secure_channel(addr, self._tls._creds, options=opts)
            self._channels[addr] = ch
        return ch

    def _drop_channel(self, addr):
        ch = self._channels.pop(addr, None)
        if ch is not None:
            ch.close()

    def _watch(self, t):
        """Run one stream; (healthy, error). Healthy: it delivered a valid
        message, or stayed open at least max_backoff (a Clerk that is
        current receives nothing until the next generation). A stream whose
        server announced heartbeats and then sent no message for
        HEARTBEAT_MISSES intervals (stalled mid-message, or silent with its
        connection up) fails, so the next server is tried."""
        heard = self._heard
        req = _messages.WatchAssignmentRequest(
            job=self.job, known_generation=heard.generation if heard else 0,
            known_incarnation=heard.incarnation if heard else "", delta_version=DELTA_VERSION)
        stub = self._channel(t.addr).unary_stream(
            _BACKUP if t.backup else _DISTRIBUTOR,
            request_serializer=_messages.WatchAssignmentRequest.SerializeToString,
            response_deserializer=_messages.WatchAssignmentResponse.FromString)
        began = time.monotonic()
        metadata = tuple(self._metadata or ()) + ((_HEARTBEAT_HEADER, "1"),)
        call = stub(req, timeout=self._recheck if t.fallback else None, metadata=metadata)
        with self._lock:
            self._call, self._target, self._moved = call, t, False
            if self._stop.is_set():
                call.cancel()
        delivered, err, silence = False, None, None
        try:
            interval = _announced_heartbeat(call.initial_metadata())
            if interval:
                silence = _Silence(call, HEARTBEAT_MISSES * interval)
            for m in call:
                if silence is not None:
                    silence.heard(busy=True)
                if not m.HasField("assignment") and not m.HasField("delta"):
                    if silence is not None:
                        silence.heard()
                    continue  # a heartbeat
                try:
                    a = receive(self._heard, m)
                except DeltaError as e:
                    # Watch again from nothing: the server sends the whole
                    # assignment, and the held one serves meanwhile.
                    self._heard = None
                    self._log.warning("slicerd_clerk: job %s: server %s sent a delta that does not apply (%s); "
                                      "keeping generation %d and watching again for a complete assignment",
                                      self.job, t.addr, e, self.generation)
                    return False, e
                except InvalidAssignment as e:
                    self._log.error("slicerd_clerk: job %s: server %s sent an assignment that is not valid (%s); "
                                    "dropping the stream and trying another server", self.job, t.addr, e)
                    return False, e
                try:
                    self._accept(a)
                except _Rejected as e:
                    self._log.error("slicerd_clerk: job %s: server %s sent %s; dropping the stream and trying another server",
                                    self.job, t.addr, e)
                    return False, e
                if not delivered:
                    self._log.info("slicerd_clerk: job %s: streaming assignments from %s (backup %s, fallback %s), generation %d",
                                   self.job, t.addr, t.backup, t.fallback, self.generation)
                delivered = True
                if silence is not None:
                    silence.heard()  # the time spent on the message was not silence
        except grpc.RpcError as e:
            err = e
        finally:
            call.cancel()
            if silence is not None:
                silence.stop()
            with self._lock:
                self._call, self._target = None, None
                moved = self._moved
        if self._stop.is_set():
            return False, None
        if silence is not None and silence.fired and not moved:
            self._log.warning("slicerd_clerk: job %s: the assignment stream from %s went silent (no message for %.1f s, %d heartbeat "
                              "intervals the server announced); keeping generation %d and trying another server",
                              self.job, t.addr, silence.limit, HEARTBEAT_MISSES, self.generation)
            return False, err
        if t.fallback and _code(err) == grpc.StatusCode.DEADLINE_EXCEEDED:
            return True, None  # the recheck timer ended a working fallback stream
        healthy = delivered or time.monotonic() - began >= self._max_backoff or moved
        if healthy:
            self._log.info("slicerd_clerk: job %s: assignment stream from %s ended (%s); reconnecting", self.job, t.addr, _describe(err))
        elif _code(err) == grpc.StatusCode.UNAVAILABLE:
            self._drop_channel(t.addr)  # connect afresh next time
        return healthy, err

    def _accept(self, a):
        """Install ``a``, a valid assignment a server sent, if it is of the
        job and supersedes the held one."""
        if a.job != self.job:
            raise _Rejected(f"an assignment of job {a.job!r}, not {self.job!r}")
        v = a.version
        if supersedes(v, self._heard.version if self._heard else None):
            self._heard = a
        prev = self._assignment
        if prev is not None and not supersedes(v, prev.version):
            if a.generation < prev.generation:
                self._log.warning("slicerd_clerk: job %s: slicerd sent generation %d, older than the held %d of the same store "
                                  "(incarnation %r); keeping the held one. If slicerd's store was restored from an older copy, "
                                  "restart this client, deleting its cache file if it has one",
                                  self.job, a.generation, prev.generation, a.incarnation)
            else:
                self._log.debug("slicerd_clerk: job %s: ignoring generation %d, not newer than the held one", self.job, a.generation)
            return
        if prev is not None and is_reset(v, prev.version):
            self._log.info("slicerd_clerk: job %s: slicerd's assignment store was recreated (incarnation %r, was %r); "
                           "replacing generation %d with the new store's %d",
                           self.job, a.incarnation, prev.incarnation, prev.generation, a.generation)
        self._assignment = a
        if self._cache_file is not None:
            try:
                cachefile.write(self._cache_file, a)
            except OSError as e:
                self._log.warning("slicerd_clerk: job %s: cannot write the assignment cache file %s: %s", self.job, self._cache_file, e)
        if prev is None:
            self._ready.set()
            self._log.info("slicerd_clerk: job %s: first assignment, generation %d, %d tasks, %d slices",
                           self.job, a.generation, len(a.tasks), len(a.slices))
        else:
            self._log.debug("slicerd_clerk: job %s: new assignment, generation %d", self.job, a.generation)
        self._notify(prev, a)

    def _notify(self, prev, a):
        if self._on_assignment is None:
            return
        try:
            self._on_assignment(prev, a)
        except Exception:
            self._log.exception("slicerd_clerk: job %s: on_assignment raised; the assignment is installed anyway", self.job)


def _addresses(addrs, what):
    if isinstance(addrs, (str, bytes)):
        raise TypeError(f"slicerd_clerk: {what} is a list of host:port addresses, not one string")
    out = []
    for a in addrs:
        if not isinstance(a, str) or ":" not in a or a.startswith(":") or a.endswith(":"):
            raise ValueError(f"slicerd_clerk: {what}: {a!r} is not a host:port address")
        out.append(a)
    return out


def _announced_heartbeat(metadata):
    """The heartbeat interval, in seconds, that response headers announce;
    0 for none (a server that predates heartbeats) or an unreadable one."""
    for k, v in metadata or ():
        if k == _HEARTBEAT_INTERVAL_HEADER:
            if isinstance(v, str) and v.isdigit() and 0 < int(v) <= 3_600_000:
                return int(v) / 1000
            return 0
    return 0


class _Silence:
    """Cancels a stream on which no message arrived for ``limit`` seconds,
    not counting the time the Clerk spends on a message it received."""

    def __init__(self, call, limit):
        self.limit = limit
        self.fired = False
        self._call = call
        self._last = time.monotonic()
        self._busy = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slicerd-clerk-silence", daemon=True)
        self._thread.start()

    def heard(self, busy=False):
        self._last = time.monotonic()
        self._busy = busy

    def _run(self):
        while True:
            wait = self.limit if self._busy else self._last + self.limit - time.monotonic()
            if wait <= 0:
                self.fired = True
                self._call.cancel()
                return
            if self._done.wait(wait):
                return

    def stop(self):
        self._done.set()
        self._thread.join()


def _code(err):
    if isinstance(err, grpc.RpcError) and hasattr(err, "code"):
        return err.code()
    return None


def _describe(err):
    if isinstance(err, grpc.RpcError) and hasattr(err, "code"):
        return f"{err.code().name}: {err.details()}"
    return str(err)
