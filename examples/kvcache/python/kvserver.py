"""kvserver in Python: the kvcache example's task (examples/kvcache), the
same HTTP API as the Go kvserver, run beside `slicerd sidecar` and
following its task with the slicerd_task library (clients/python). It can
share a job with Go kvserver tasks: the Go kvcache client routes to either.

    GET /kv/KEY     200 and the value, 404 if absent, 421 if not this task's key
    PUT /kv/KEY     204 (at most 1 MiB), 421 if not this task's key
    DELETE /kv/KEY  204, 421 if not this task's key
    GET /healthz    200 (the sidecar's --health-url)
    GET /stats      {"entries": N, "served": N}

Usage: kvserver.py --addr 127.0.0.1:8080 --local-api-socket PATH
                   [--job kv --tls-cert task.pem --tls-key task-key.pem --tls-ca ca.pem]
                   [--consistency strong --backing http://HOST:PORT [--await 2s]
                    [--record FILE --task NAME]]
                   [--state-socket PATH]

With --consistency strong (the sidecar runs with --consistency strong, on a
job configured strong) each request holds a handle on its key, taken over
the sidecar's local API: reads fill from and writes go through to the
backing store (kvcache.BackingHandler's HTTP API) with the handle's fencing
token, so a former owner's late write is refused, and a request answers
only if the key stayed the task's throughout, or 421. --record appends each
satisfied request to FILE in lease/leasecheck's record form, as the Go
kvserver's -record does, for the history checker.

With --state-socket (the sidecar's --app-state-socket, with its
--handoff-addr) the entries move with their keys, as the Go kvserver's do
with -handoff: the task serves their export and import there
(slicerd_task.StateServer), keeps the entries of lost ranges for 10 s
for their new owner to fetch, and a miss on a key it has just gained waits
for the key's state first.

Otherwise the entries of the ranges the task loses are dropped. Each request's load
(1 per request) is reported to the sidecar once a second. With --tls-* it
serves TLS with the task's certificate and, like the Go kvserver
(kvcache.RequireJobPeer), only to callers whose certificate, from the
cluster's CA, names a client of the job (client/JOB or client/*) or a task
of it; others get 403.
"""

import argparse
import http.client
import http.server
import json
import socket
import ssl
import sys
import threading
import time
import urllib.parse

import slicerd_task

MAX_VALUE_BYTES = 1 << 20


LEAVING_KEEP = 10.0  # seconds the entries of lost ranges are kept for export


class Store:
    def __init__(self, keep_leaving=False):
        self.lock = threading.Lock()
        self.entries = {}
        self.served = 0
        self.load = {}
        self.keep_leaving = keep_leaving
        self.leaving = {}  # key -> (value, when it left), with handoff

    def drop_ranges(self, lost):
        now = time.monotonic()
        with self.lock:
            for key in list(self.entries):
                h = slicerd_task.slice_key(key)
                if any(s <= h < e for s, e in lost):
                    val = self.entries.pop(key)
                    if self.keep_leaving:
                        self.leaving[key] = (val, now)
            for key, (_, when) in list(self.leaving.items()):
                if now - when > LEAVING_KEEP:
                    del self.leaving[key]

    def export(self, start, end):
        """The entries of slice keys [start, end), those of lost ranges
        still kept included (handoff's export)."""
        with self.lock:
            items = list(self.entries.items()) + [(k, v) for k, (v, _) in self.leaving.items() if k not in self.entries]
        return [(k, v) for k, v in items if start <= slicerd_task.slice_key(k) < end]

    def import_(self, entries):
        """Adds fetched entries, keeping any the task already holds (a
        write since the key arrived is newer)."""
        with self.lock:
            for k, v in entries:
                self.entries.setdefault(k, v)
                self.leaving.pop(k, None)

    def count(self, key):
        with self.lock:
            self.served += 1
            self.load[key] = self.load.get(key, 0.0) + 1.0

    def take_load(self):
        with self.lock:
            load, self.load = self.load, {}
        return load


class Backing:
    """The backing store of a strong job: kvcache.BackingHandler's HTTP
    API, one kept-alive connection per thread."""

    def __init__(self, base):
        u = urllib.parse.urlsplit(base)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"--backing {base!r}: use http://HOST:PORT")
        self.host, self.port = u.hostname, u.port or 80
        self.local = threading.local()

    def _call(self, method, path, body=None):
        for attempt in range(2):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
            try:
                conn.request(method, path, body)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
            except BaseException:
                conn.close()
                self.local.conn = None
                raise

    def get(self, key):
        """The value, or None when the store has none."""
        status, body = self._call("GET", "/backing/" + urllib.parse.quote(key, safe=""))
        if status == 404:
            return None
        if status != 200:
            raise OSError(f"backing store answered {status}: {body[:200]!r}")
        return body

    def put(self, key, val, token):
        """Write through; False when the store refused the token as stale."""
        status, body = self._call("PUT", "/backing/" + urllib.parse.quote(key, safe="") + f"?token={token}", val)
        if status == 409:
            return False
        if status != 204:
            raise OSError(f"backing store answered {status}: {body[:200]!r}")
        return True


class Record:
    """Satisfied requests, one line each: "task token start end key" with
    CLOCK_MONOTONIC nanoseconds (lease/leasecheck's record form)."""

    def __init__(self, path, task):
        self.f = open(path, "a", encoding="utf-8", errors="replace")
        self.task = task
        self.lock = threading.Lock()

    def add(self, key, token, start, end):
        with self.lock:
            self.f.write(f"{self.task} {token} {start} {end} {key.decode(errors='replace')}\n")
            self.f.flush()


def job_peer(cert, job):
    """Whether a verified peer certificate names a client of job or a task
    of it (slicerd's SPIFFE identities)."""
    uris = [v for k, v in (cert or {}).get("subjectAltName", ()) if k == "URI"]
    return any(u in (f"spiffe://slicerd/client/{job}", "spiffe://slicerd/client/*")
               or u.startswith(f"spiffe://slicerd/task/{job}/") for u in uris)


def make_handler(task, store, job=None, strong=None, handoff=False):
    """strong, for a strong job: an object with backing, record (or None)
    and wait (seconds a request waits for a key whose lease is on its
    way)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def parse_request(self):
            if not super().parse_request():
                return False
            if job is not None and not job_peer(self.connection.getpeercert(), job):
                self.reply(403, b"kvcache: only clients and tasks of the job may call this task\n")
                return False
            return True

        def reply(self, code, body=b"", ctype="text/plain"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def misdirected(self):
            self.reply(421, b"kvcache: key is not assigned to this task; refresh the assignment and retry at the owner\n")

        def key(self):
            path = urllib.parse.urlsplit(self.path).path
            if not path.startswith("/kv/") or len(path) == 4:
                self.reply(404, b"not found\n")
                return None
            key = urllib.parse.unquote_to_bytes(path[4:])
            if strong is None and not task.owns(key):
                self.misdirected()
                return None
            store.count(key)
            return key

        def claim(self, key):
            """Strong mode: a handle on key and when the request started,
            or None (answered 421) when the task does not own it."""
            start = time.monotonic_ns()
            try:
                h = task.acquire(key)
                if not h.owned and strong.wait > 0:
                    h = task.acquire(key, wait=strong.wait)
                    if h.owned:
                        # Taken again, so that the recorded request starts
                        # when the task owned the key, not before the wait.
                        h.release()
                        start = time.monotonic_ns()
                        h = task.acquire(key)
            except (OSError, slicerd_task.LocalAPIError) as e:
                # No sidecar, no handle: the task cannot vouch for the key.
                self.reply(503, f"kvcache: the sidecar's local API: {e}\n".encode())
                return None
            if not h.owned:
                self.misdirected()
                return None
            return h, start

        def drop(self, claim):
            """Release the handle of a request that failed anyway."""
            try:
                claim[0].release()
            except (OSError, slicerd_task.LocalAPIError):
                pass

        def kept(self, key, claim):
            """Release the handle; whether the key stayed the task's
            throughout (recorded when it did). A release the sidecar did
            not answer counts as not kept."""
            h, start = claim
            try:
                if not h.release():
                    return False
            except (OSError, slicerd_task.LocalAPIError):
                return False
            if strong.record is not None:
                strong.record.add(key, h.token, start, time.monotonic_ns())
            return True

        def strong_get(self, key):
            c = self.claim(key)
            if c is None:
                return
            try:
                with store.lock:
                    val = store.entries.get(key)
                if val is None:
                    val = strong.backing.get(key.decode(errors="replace"))
                    if val is not None:
                        with store.lock:
                            store.entries[key] = val
            except OSError as e:
                self.drop(c)
                return self.reply(503, f"kvcache: reading the backing store: {e}\n".encode())
            if not self.kept(key, c):
                return self.misdirected()
            if val is None:
                return self.reply(404, b"kvcache: key not found\n")
            self.reply(200, val, "application/octet-stream")

        def strong_put(self, key, val):
            c = self.claim(key)
            if c is None:
                return
            try:
                written = strong.backing.put(key.decode(errors="replace"), val, c[0].token)
            except OSError as e:
                self.drop(c)
                return self.reply(503, f"kvcache: writing the backing store: {e}\n".encode())
            if not written:
                # A newer owner wrote the key: this task's view is behind.
                self.drop(c)
                return self.misdirected()
            with store.lock:
                store.entries[key] = val
            kept = self.kept(key, c)
            if not kept or not task.owns(key):
                # The write stands if the lease held (it reached the
                # store); only the cached copy goes.
                with store.lock:
                    store.entries.pop(key, None)
                if not kept:
                    return self.misdirected()
            self.reply(204)

        def do_GET(self):
            if self.path == "/healthz":
                return self.reply(200, b"ok\n")
            if self.path == "/stats":
                with store.lock:
                    body = json.dumps({"entries": len(store.entries), "served": store.served}).encode()
                return self.reply(200, body, "application/json")
            key = self.key()
            if key is None:
                return
            if strong is not None:
                return self.strong_get(key)
            with store.lock:
                val = store.entries.get(key)
            if val is None and handoff:
                # A key just gained may have its state on the way.
                try:
                    task.await_state(key, 5.0)
                except (OSError, slicerd_task.LocalAPIError):
                    pass  # answer from what is here
                with store.lock:
                    val = store.entries.get(key)
            if val is None:
                return self.reply(404, b"kvcache: key not found\n")
            self.reply(200, val, "application/octet-stream")

        def do_PUT(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n > MAX_VALUE_BYTES:
                return self.reply(413, b"kvcache: value larger than 1048576 bytes; store smaller values\n")
            val = self.rfile.read(n)
            key = self.key()
            if key is None:
                return
            if strong is not None:
                return self.strong_put(key, val)
            with store.lock:
                store.entries[key] = val
            self.reply(204)

        def do_DELETE(self):
            key = self.key()
            if key is None:
                return
            c = self.claim(key) if strong is not None else None
            if strong is not None and c is None:
                return
            with store.lock:
                store.entries.pop(key, None)
            if c is not None and not self.kept(key, c):
                return self.misdirected()
            self.reply(204)

    return Handler


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 refuses connections a busy
    # client opens in a burst.
    request_queue_size = 1024
    tls = None  # an ssl.SSLContext to serve TLS with

    def get_request(self):
        sock, addr = self.socket.accept()
        # A reply is written as its headers, then its body: without
        # TCP_NODELAY the body waits for the client's delayed ACK of the
        # headers (40 ms on Linux).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            # The handshake runs on the request's thread, at its first read.
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request, client_address):
        # A client closing a kept-alive connection, or failing the
        # handshake, is not this server's error.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ssl.SSLError)):
            return
        super().handle_error(request, client_address)


def report_load(task, store, stop):
    while not stop.wait(1.0):
        load = store.take_load()
        if load:
            try:
                task.report_load(load.items())
            except (OSError, slicerd_task.LocalAPIError):
                pass  # the next window tries again


def parse_seconds(s):
    """A duration such as 2s, 500ms or 0s, in seconds, at most 10 s."""
    for unit, scale in (("ms", 1e-3), ("s", 1.0)):
        if s.endswith(unit):
            try:
                v = float(s[: -len(unit)]) * scale
            except ValueError:
                break
            if 0 <= v <= 10:
                return v
            break
    raise ValueError(f"--await {s!r}: use a duration from 0s to 10s, such as 2s or 500ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", required=True, help="host:port to serve on")
    ap.add_argument("--local-api-socket", required=True, help="the sidecar's --local-api-socket")
    ap.add_argument("--job", default="kv", help="the task's job, whose clients and tasks it serves with TLS")
    ap.add_argument("--tls-cert", help="the task's certificate (spiffe://slicerd/task/JOB/TASK), PEM")
    ap.add_argument("--tls-key", help="the key of --tls-cert, PEM")
    ap.add_argument("--tls-ca", help="the cluster's CA certificate, PEM")
    ap.add_argument("--consistency", default="affinity", choices=["affinity", "strong"],
                    help="the job's consistency, as the sidecar's --consistency")
    ap.add_argument("--backing", help="strong mode: the backing store's base URL (http://HOST:PORT)")
    ap.add_argument("--await", dest="await_", default="2s",
                    help="strong mode: how long a request waits for a key whose lease is on its way (0s: answer 421 at once)")
    ap.add_argument("--record", help="strong mode: append satisfied requests to this file (lease/leasecheck's form)")
    ap.add_argument("--task", help="the task's name, for --record")
    ap.add_argument("--state-socket", help="state handoff: serve the sidecar's --app-state-socket here")
    ap.add_argument("--listen-fd", type=int,
                    help="serve on this inherited listening TCP socket (a file descriptor) instead of binding "
                         "--addr: a supervisor that chose the port passes it, so no other process can take it meanwhile")
    args = ap.parse_args()
    strong = None
    if args.consistency == "strong":
        if not args.backing:
            ap.error("--consistency strong needs --backing")
        if args.record and not args.task:
            ap.error("--record needs --task")
        try:
            wait = parse_seconds(args.await_)
            backing = Backing(args.backing)
        except ValueError as e:
            ap.error(str(e))
        strong = argparse.Namespace(backing=backing, wait=wait,
                                    record=Record(args.record, args.task) if args.record else None)
    tls_args = [args.tls_cert, args.tls_key, args.tls_ca]
    if any(tls_args) and not all(tls_args):
        ap.error("--tls-cert, --tls-key and --tls-ca go together")
    host, port = args.addr.rsplit(":", 1)
    store = Store(keep_leaving=bool(args.state_socket))
    task = slicerd_task.Task(args.local_api_socket, on_change=lambda gen, gained, lost: store.drop_ranges(lost)).start()
    stop = threading.Event()
    threading.Thread(target=report_load, args=(task, store, stop), daemon=True).start()
    # The state socket first: the sidecar may hand state over as soon as
    # the application answers its health check.
    state = None
    if args.state_socket:
        state = slicerd_task.StateServer(args.state_socket, store.export, store.import_).start()
    handler = make_handler(task, store, args.job if args.tls_cert else None, strong, handoff=bool(args.state_socket))
    if args.listen_fd is not None:
        srv = Server((host, int(port)), handler, bind_and_activate=False)
        srv.socket.close()
        try:
            srv.socket = socket.socket(fileno=args.listen_fd)
        except OSError as e:
            ap.error(f"--listen-fd {args.listen_fd}: {e}")
        srv.server_address = srv.socket.getsockname()
    else:
        srv = Server((host, int(port)), handler)
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        ctx.load_verify_locations(args.tls_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.set_alpn_protocols(["http/1.1"])
        srv.tls = ctx
    print(f"kvserver.py serving at {host}:{srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        task.close()
        if state is not None:
            state.close()


if __name__ == "__main__":
    main()
