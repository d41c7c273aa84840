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
import http.server
import json
import os
import socket
import socketserver
import struct
import threading
import time

import xxhash

__all__ = ["slice_key", "now", "Task", "Handle", "LocalAPIError", "StateServer"]

if hasattr(time, "CLOCK_BOOTTIME"):
    def now():
        """The clock ``Handle.held_until`` is on, in seconds: monotonic,
        and (on Linux) counting time the host spent suspended, as the
        sidecar's lease clock does, so a promise does not outlive a
        suspend."""
        return time.clock_gettime(time.CLOCK_BOOTTIME)
else:  # pragma: no cover - the sidecar runs on Linux
    now = time.monotonic

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


class Handle:
    """A hold on one key for the span of a request (``Task.acquire``), as
    a Go task's ``slicelet.Handle``.

    ``owned``: whether the task owned the key when the handle was taken;
    ``token``: the key's fencing token (pass it to the storage the request
    writes to, which refuses a lower one); ``deadline``: in strong mode,
    the ``time.monotonic()`` by which the task's lease on the key may end,
    counted from before the request was sent (None in affinity mode);
    ``held_until``: in strong mode, the ``now()`` until which the key
    stays the task's without a break while the handle is held (None when
    the sidecar promised nothing: affinity mode, or a move of the key had
    begun). ``kept()`` says whether the key stayed the task's, and
    ``release()`` gives the handle up and says the same; before
    ``held_until`` both answer from memory, and the release is sent
    without waiting for its answer, so a request costs one round trip.
    Use it as a context manager to release on every path.
    """

    __slots__ = ("_task", "id", "owned", "token", "deadline", "held_until", "continuous")

    def __init__(self, task, hid, owned, token, deadline, held_until=None):
        self._task = task
        self.id = hid
        self.owned = owned
        self.token = token
        self.deadline = deadline
        self.held_until = held_until
        self.continuous = None  # release()'s answer, once released

    def kept(self):
        """Whether the key has been the task's without a break since the
        handle was taken, and still is: from memory before ``held_until``,
        else by asking the sidecar (``check()``). Ask it before making a
        request's result visible."""
        if self.held_until is not None and now() < self.held_until:
            return True
        return self.check()

    def check(self):
        """Whether the key has been the task's without a break since the
        handle was taken, and still is; it also moves ``deadline`` on."""
        if not self.id:
            return False
        sent = time.monotonic()
        resp = self._task._unary("CheckHandle", {"handle": self.id})
        ns = int(resp.get("validForNs", 0))
        if ns > 0:
            self.deadline = sent + ns / 1e9
        return bool(resp.get("continuous", False))

    def release(self):
        """Give the handle up; return whether the key stayed the task's
        until then (False for a handle not owned). Releasing twice calls
        the sidecar once."""
        if self.continuous is None:
            if not self.id:
                self.continuous = False
            elif self.held_until is not None and now() < self.held_until:
                # Known here: the release need not be waited for.
                self.continuous = True
                self._task._release_later(self.id)
            else:
                resp = self._task._unary("ReleaseHandle", {"handle": self.id})
                self.continuous = bool(resp.get("continuous", False))
        return self.continuous

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


class _Closed(ConnectionError):
    """The sidecar closed a kept connection before answering."""


class _Conn:
    """One kept-alive HTTP/1.1 connection to the sidecar for unary calls:
    the request goes out in one write and the answer is read with one
    buffered reader, which costs a fraction of http.client's header
    parsing on calls of a few tens of microseconds."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise
        self.rfile = self.sock.makefile("rb")
        # Requests sent whose answers are still to be read (and dropped):
        # HTTP/1.1 answers in order, so the next call reads them first.
        self.pending = 0

    def close(self):
        self.rfile.close()
        self.sock.close()

    def send(self, path, payload, timeout):
        """Send a request whose answer the next call reads and drops."""
        self.sock.settimeout(timeout)
        self._write(path, payload)
        self.pending += 1

    def call(self, path, payload, timeout):
        self.sock.settimeout(timeout)
        self._write(path, payload)
        while self.pending:
            _, _, close = self._read()
            self.pending -= 1
            if close:
                raise _Closed("the sidecar closed the connection after an earlier answer")
        return self._read()

    def _write(self, path, payload):
        self.sock.sendall(b"POST %s HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (path.encode(), len(payload), payload))

    def _read(self):
        line = self.rfile.readline(65537)
        if not line:
            raise _Closed("the sidecar closed the connection")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise LocalAPIError("unknown", f"not an HTTP answer: {line[:100]!r}")
        status = int(parts[1])
        length, chunked, close = None, False, False
        while True:
            h = self.rfile.readline(65537)
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        if chunked:
            data = b""
            while True:
                size = int(self.rfile.readline(65537).split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                data += self.rfile.read(size)
                self.rfile.readline(65537)
        elif length is not None:
            data = self.rfile.read(length)
        else:
            data, close = self.rfile.read(), True
        return status, data, close


def _envelope(flags, payload):
    return struct.pack(">BI", flags, len(payload)) + payload


class Task:
    """The task as its application sees it through the sidecar.

    ``start()`` follows the task's ranges on a daemon thread; ``owns(key)``
    then answers from memory. ``on_change``, if given, is called on that
    thread with ``(generation, gained, lost)`` (lists of ``(start, end)``
    slice-key ranges) after every change is applied: what the task gained
    and lost since the call before, also across a restart of the sidecar.
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
        self._local = threading.local()  # each thread's kept-alive connection for unary calls
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

    def acquire(self, key, wait=0.0):
        """Take a handle on ``key`` (bytes or str). ``wait`` (seconds, at
        most 10) lets a key that is the task's in the assignment but whose
        lease is on its way be waited for; 0 answers at once. A handle not
        owned has ``owned`` False and needs no release."""
        k = key.encode() if isinstance(key, str) else key
        sent, sent_now = time.monotonic(), now()
        resp = self._unary("AcquireHandle", {"key": base64.b64encode(k).decode(), "waitMs": int(wait * 1000)}, wait)
        ns, held = int(resp.get("validForNs", 0)), int(resp.get("heldForNs", 0))
        return Handle(self, int(resp.get("handle", 0)), bool(resp.get("owned", False)), int(resp.get("token", 0)),
                      sent + ns / 1e9 if ns > 0 else None, sent_now + held / 1e9 if held > 0 else None)

    def _release_later(self, hid):
        # Sent on this thread's connection; its answer is read and dropped
        # by the thread's next call. A release that cannot be sent is made
        # at once on a new connection.
        payload = json.dumps({"handle": hid}).encode()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            try:
                conn.send(_SERVICE + "ReleaseHandle", payload, self._timeout)
                return
            except OSError:
                conn.close()
                self._local.conn = None
        self._unary("ReleaseHandle", {"handle": hid})

    def await_state(self, key, wait=1.0):
        """Wait (at most ``wait`` seconds, at most 10) until the state of
        ``key``, if a handoff is bringing it to the task, has been
        imported; call it on a miss before answering from local state.
        Returns False if the wait ended first."""
        k = key.encode() if isinstance(key, str) else key
        resp = self._unary("AwaitState", {"key": base64.b64encode(k).decode(), "waitMs": int(wait * 1000)}, wait)
        return bool(resp.get("done", False))

    def _unary(self, method, body, wait=0.0):
        # Each thread keeps one connection alive (a call on it costs a
        # round trip; a new one costs a connect too). A kept connection the
        # sidecar closed (it restarted) fails before the request reaches
        # it: such a call is sent once more, on a new connection. A call
        # the sidecar may hold for wait seconds gets them on top of the
        # timeout: an acquire given up just as the sidecar granted it
        # would leave a handle nobody releases, which every move of its
        # key then waits out.
        payload = json.dumps(body).encode()
        timeout = (70.0 if method == "SetDraining" else self._timeout) + max(0.0, min(wait, 10.0))
        for attempt in range(2):
            conn = getattr(self._local, "conn", None)
            fresh = conn is None
            if fresh:
                conn = self._local.conn = _Conn(self._path)
            try:
                status, data, close = conn.call(_SERVICE + method, payload, timeout)
                if close:
                    conn.close()
                    self._local.conn = None
            except (_Closed, BrokenPipeError, ConnectionResetError):
                conn.close()
                self._local.conn = None
                if fresh or attempt:
                    raise
                continue
            except BaseException:
                conn.close()
                self._local.conn = None
                raise
            if status != 200:
                try:
                    err = json.loads(data)
                except ValueError:
                    err = {"code": "unknown", "message": data.decode(errors="replace")}
                raise LocalAPIError(err.get("code", "unknown"), err.get("message", ""))
            return json.loads(data or b"{}")

    # Following the ranges.

    def start(self):
        """Start following the task's ranges; returns at once."""
        self._thread = threading.Thread(target=self._follow, name="slicerd-ranges", daemon=True)
        self._thread.start()
        return self

    def close(self):
        """Stop following the ranges, and close the calling thread's
        connection for calls (another thread's closes with the thread)."""
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None
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
            # gained and lost against the ranges the application last
            # heard of, not the message's: those count from the previous
            # message on the same stream, and the first message of a
            # stream reopened after a break (the sidecar restarted) gains
            # every range and loses none.
            prev = list(zip(self._starts, self._ends))
            self._starts = [s for s, _ in owned]
            self._ends = [e for _, e in owned]
            self._generation = gen
            self._changed.notify_all()
        gained, lost = _subtract(owned, prev), _subtract(prev, owned)
        if self._on_change is not None and (gained or lost):
            self._on_change(gen, gained, lost)


def _subtract(x, y):
    """The parts of the sorted, merged ranges x outside those of y."""
    out, j = [], 0
    for start, end in x:
        while j < len(y) and y[j][1] <= start:
            j += 1
        k = j
        while k < len(y) and y[k][0] < end:
            if y[k][0] > start:
                out.append((start, y[k][0]))
            start = max(start, y[k][1])
            if y[k][1] >= end:
                break
            k += 1
        if start < end:
            out.append((start, end))
    return out


# State handoff: the application's side of slicer.v1.TaskStateService.

_STATE_SERVICE = "/slicer.v1.TaskStateService/"
_EXPORT_CHUNK = 512 << 10  # raw bytes of keys and values per message
_MAX_IMPORT_BODY = 8 << 20


class _StateHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _reply(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, code, connect_code, message):
        self._reply(code, json.dumps({"code": connect_code, "message": message}).encode())

    def _body(self):
        """The request's body, sized or chunked (the sidecar streams a
        request whose length it does not know ahead); None if too big."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts, total = [], 0
            while True:
                size = int(self.rfile.readline(65537).split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                total += size
                if total > _MAX_IMPORT_BODY:
                    return None
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
        n = int(self.headers.get("Content-Length") or 0)
        if n > _MAX_IMPORT_BODY:
            return None
        return self.rfile.read(n)

    def do_POST(self):
        body = self._body()
        if body is None:
            self.close_connection = True
            return self._error(400, "resource_exhausted", f"request over {_MAX_IMPORT_BODY} bytes")
        if self.path == _STATE_SERVICE + "ImportState":
            return self._import(body)
        if self.path == _STATE_SERVICE + "ExportState":
            return self._export(body)
        self._error(404, "unimplemented", f"no method {self.path}")

    def _import(self, body):
        try:
            msg = json.loads(body or b"{}")
            entries = [(base64.b64decode(e.get("key", "")), base64.b64decode(e.get("value", "")))
                       for e in msg.get("entries") or []]
        except (ValueError, TypeError, AttributeError) as e:
            return self._error(400, "invalid_argument", f"ImportState: {e}")
        try:
            self.server.importer(entries)
        except Exception as e:  # noqa: BLE001 - the sidecar logs it
            return self._error(500, "internal", f"ImportState: {e}")
        self._reply(200, b"{}")

    def _export(self, body):
        try:
            if len(body) < 5:
                raise ValueError("no message")
            _, size = struct.unpack(">BI", body[:5])
            msg = json.loads(body[5:5 + size] or b"{}")
            start, end = int(msg.get("start", 0)), int(msg.get("end", 0))
        except (ValueError, TypeError, struct.error) as e:
            return self._error(400, "invalid_argument", f"ExportState: {e}")
        self.send_response(200)
        self.send_header("Content-Type", "application/connect+json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(flags, payload):
            data = _envelope(flags, payload)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        end_msg = {}
        try:
            batch, size = [], 0
            for key, value in self.server.exporter(start, end):
                batch.append({"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()})
                size += len(key) + len(value)
                if size >= _EXPORT_CHUNK:
                    chunk(0, json.dumps({"entries": batch}).encode())
                    batch, size = [], 0
            if batch:
                chunk(0, json.dumps({"entries": batch}).encode())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        except Exception as e:  # noqa: BLE001 - told to the sidecar
            end_msg = {"error": {"code": "internal", "message": f"ExportState: {e}"}}
        chunk(0x02, json.dumps(end_msg).encode())
        self.wfile.write(b"0\r\n\r\n")


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def verify_request(self, request, client_address):
        # Only the application's own user (or root) may call: the sidecar
        # runs as that user.
        cred = request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, uid, _ = struct.unpack("3i", cred)
        return uid in (os.getuid(), 0)


class StateServer:
    """Serves ``slicerd sidecar --app-state-socket PATH``: the sidecar
    calls ``exporter(start, end)`` for the state of the keys whose slice
    keys are in ``[start, end)`` (an iterable of ``(key, value)`` bytes
    pairs) when another task gains them, and ``importer(entries)`` (a list
    of ``(key, value)``) with the state of keys this task gains.

    ``importer`` must not replace an entry the application already holds:
    that one was written since the key arrived. ``exporter`` is called
    while the task may be losing or have lost the keys: keep the state of
    keys moved away for a few seconds. Both run on the server's threads.
    The socket is created mode 0600 and callers of another user are
    refused.
    """

    def __init__(self, path, exporter, importer):
        if os.path.exists(path):
            os.unlink(path)
        old = os.umask(0o177)
        try:
            self._srv = _UnixHTTPServer(path, _StateHandler)
        finally:
            os.umask(old)
        self._srv.exporter = exporter
        self._srv.importer = importer
        self._path = path
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._srv.serve_forever, name="slicerd-state", daemon=True)
        self._thread.start()
        return self

    def close(self):
        self._srv.shutdown()
        self._srv.server_close()
        try:
            os.unlink(self._path)
        except OSError:
            pass
