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

Entries of the ranges the task loses are dropped. Each request's load
(1 per request) is reported to the sidecar once a second. With --tls-* it
serves TLS with the task's certificate and, like the Go kvserver
(kvcache.RequireJobPeer), only to callers whose certificate, from the
cluster's CA, names a client of the job (client/JOB or client/*) or a task
of it; others get 403.
"""

import argparse
import http.server
import json
import ssl
import sys
import threading
import urllib.parse

import slicerd_task

MAX_VALUE_BYTES = 1 << 20


class Store:
    def __init__(self):
        self.lock = threading.Lock()
        self.entries = {}
        self.served = 0
        self.load = {}

    def drop_ranges(self, lost):
        with self.lock:
            for key in list(self.entries):
                h = slicerd_task.slice_key(key)
                if any(s <= h < e for s, e in lost):
                    del self.entries[key]

    def count(self, key):
        with self.lock:
            self.served += 1
            self.load[key] = self.load.get(key, 0.0) + 1.0

    def take_load(self):
        with self.lock:
            load, self.load = self.load, {}
        return load


def job_peer(cert, job):
    """Whether a verified peer certificate names a client of job or a task
    of it (slicerd's SPIFFE identities)."""
    uris = [v for k, v in (cert or {}).get("subjectAltName", ()) if k == "URI"]
    return any(u in (f"spiffe://slicerd/client/{job}", "spiffe://slicerd/client/*")
               or u.startswith(f"spiffe://slicerd/task/{job}/") for u in uris)


def make_handler(task, store, job=None):
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

        def key(self):
            path = urllib.parse.urlsplit(self.path).path
            if not path.startswith("/kv/") or len(path) == 4:
                self.reply(404, b"not found\n")
                return None
            key = urllib.parse.unquote_to_bytes(path[4:])
            if not task.owns(key):
                self.reply(421, b"kvcache: key is not assigned to this task; refresh the assignment and retry at the owner\n")
                return None
            store.count(key)
            return key

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
            with store.lock:
                store.entries[key] = val
            self.reply(204)

        def do_DELETE(self):
            key = self.key()
            if key is None:
                return
            with store.lock:
                store.entries.pop(key, None)
            self.reply(204)

    return Handler


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    tls = None  # an ssl.SSLContext to serve TLS with

    def get_request(self):
        sock, addr = self.socket.accept()
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", required=True, help="host:port to serve on")
    ap.add_argument("--local-api-socket", required=True, help="the sidecar's --local-api-socket")
    ap.add_argument("--job", default="kv", help="the task's job, whose clients and tasks it serves with TLS")
    ap.add_argument("--tls-cert", help="the task's certificate (spiffe://slicerd/task/JOB/TASK), PEM")
    ap.add_argument("--tls-key", help="the key of --tls-cert, PEM")
    ap.add_argument("--tls-ca", help="the cluster's CA certificate, PEM")
    args = ap.parse_args()
    tls_args = [args.tls_cert, args.tls_key, args.tls_ca]
    if any(tls_args) and not all(tls_args):
        ap.error("--tls-cert, --tls-key and --tls-ca go together")
    host, port = args.addr.rsplit(":", 1)
    store = Store()
    task = slicerd_task.Task(args.local_api_socket, on_change=lambda gen, gained, lost: store.drop_ranges(lost)).start()
    stop = threading.Event()
    threading.Thread(target=report_load, args=(task, store, stop), daemon=True).start()
    srv = Server((host, int(port)), make_handler(task, store, args.job if args.tls_cert else None))
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


if __name__ == "__main__":
    main()
