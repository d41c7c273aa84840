"""A task library for Python applications run beside ``slicerd sidecar``.

The sidecar is the task's member of the slicerd cluster; this library
talks to its local API (``slicer.v1.SidecarService``, docs/api.md) over
the Unix socket given to ``slicerd sidecar --local-api-socket``. It keeps
the task's key ranges in memory, so ``owns(key)`` answers without a call,
and relays load and drains.

Only the standard library and Debian's ``python3-xxhash`` are needed: the
calls use the Connect protocol with JSON over HTTP/1.1.
"""

import base64
import bisect
import http.client
import json
import socket
import struct
import threading

import xxhash

__all__ = ["slice_key", "Task", "LocalAPIError"]

_SERVICE = "/slicer.v1.SidecarService/"
KEY_SPACE_END = 1 << 63


def slice_key(key):
    """Return the slice key of ``key`` (bytes or str, str as UTF-8):
    XXH64 with seed 0, shifted right by one bit, as every slicerd client
    computes it."""
    if isinstance(key, str):
        key = key.encode()
    return xxhash.xxh64_intdigest(key) >> 1


class LocalAPIError(Exception):
    """A local API call failed: ``code`` is the Connect error code
    (``invalid_argument``, ``unavailable``, ...)."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("sidecar", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def _envelope(flags, payload):
    return struct.pack(">BI", flags, len(payload)) + payload


class Task:
    """The task as its application sees it through the sidecar.

    ``start()`` follows the task's ranges on a daemon thread; ``owns(key)``
    then answers from memory. ``on_change``, if given, is called on that
    thread with ``(generation, gained, lost)`` (lists of ``(start, end)``
    slice-key ranges) after every change is applied.
    """

    def __init__(self, socket_path, on_change=None, timeout=10.0):
        self._path = socket_path
        self._timeout = timeout
        self._on_change = on_change
        self._lock = threading.Lock()
        self._starts = []  # sorted range starts
        self._ends = []
        self._generation = 0
        self._changed = threading.Condition(self._lock)
        self._thread = None
        self._stop = threading.Event()
        self._conn = None
        self.error = None  # why the ranges stream last failed; None while it runs

    # The ranges.

    def owns(self, key):
        """Whether the task holds ``key`` in the newest assignment it has
        heard of; False before the first."""
        h = slice_key(key)
        with self._lock:
            i = bisect.bisect_right(self._starts, h) - 1
            return i >= 0 and h < self._ends[i]

    def ranges(self):
        """The ranges held, as ``(generation, [(start, end), ...])``."""
        with self._lock:
            return self._generation, list(zip(self._starts, self._ends))

    def wait_generation(self, at_least, timeout=None):
        """Wait until the ranges come from generation ``at_least`` or
        later; return whether they do."""
        with self._changed:
            return self._changed.wait_for(lambda: self._generation >= at_least, timeout)

    # The calls.

    def report_load(self, loads):
        """Count load: ``loads`` is an iterable of ``(key, cost)``, key
        bytes or str, cost a non-negative number in the job's unit."""
        body = {"loads": [{"key": base64.b64encode(k.encode() if isinstance(k, str) else k).decode(), "cost": float(c)}
                          for k, c in loads]}
        self._unary("ReportLoad", body)

    def set_draining(self, draining):
        """Drain the task (its keys move away; returns once they have) or
        end the drain."""
        self._unary("SetDraining", {"draining": bool(draining)})

    def _unary(self, method, body):
        conn = _UnixConnection(self._path, self._timeout if method != "SetDraining" else 70.0)
        try:
            conn.request("POST", _SERVICE + method, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                try:
                    err = json.loads(data)
                except ValueError:
                    err = {"code": "unknown", "message": data.decode(errors="replace")}
                raise LocalAPIError(err.get("code", "unknown"), err.get("message", ""))
            return json.loads(data or b"{}")
        finally:
            conn.close()

    # Following the ranges.

    def start(self):
        """Start following the task's ranges; returns at once."""
        self._thread = threading.Thread(target=self._follow, name="slicerd-ranges", daemon=True)
        self._thread.start()
        return self

    def close(self):
        """Stop following the ranges."""
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(5)

    def _follow(self):
        # The sidecar may start after the application, or restart: the
        # stream is opened again, backing off from 0.1 s to 2 s.
        backoff = 0.1
        while not self._stop.is_set():
            try:
                self._watch()
                backoff = 0.1
            except Exception as e:  # noqa: BLE001 - kept for the application to read
                if self._stop.is_set():
                    return
                self.error = e
            self._stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)

    def _watch(self):
        conn = _UnixConnection(self._path, None)
        self._conn = conn
        try:
            conn.request("POST", _SERVICE + "WatchRanges", _envelope(0, b"{}"),
                         {"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise LocalAPIError("unknown", f"WatchRanges answered HTTP {resp.status}")
            while not self._stop.is_set():
                head = resp.read(5)
                if len(head) < 5:
                    return
                flags, size = struct.unpack(">BI", head)
                msg = json.loads(resp.read(size) or b"{}")
                if flags & 0x02:  # end of stream
                    if "error" in msg:
                        raise LocalAPIError(msg["error"].get("code", "unknown"), msg["error"].get("message", ""))
                    return
                self.error = None
                self._apply(msg)
        finally:
            conn.close()

    def _apply(self, msg):
        def pairs(rs):
            return [(int(r.get("start", 0)), int(r.get("end", 0))) for r in rs or []]

        owned = pairs(msg.get("owned"))
        gen = int(msg.get("generation", 0))
        with self._changed:
            self._starts = [s for s, _ in owned]
            self._ends = [e for _, e in owned]
            self._generation = gen
            self._changed.notify_all()
        if self._on_change is not None:
            self._on_change(gen, pairs(msg.get("gained")), pairs(msg.get("lost")))
