"""A local S3-compatible server and a fault-injecting proxy, for tests and benchmarks
(turbofeed's and users': see :mod:`turbofeed.testing`).

Both listen on 127.0.0.1 only, run in threads of this process and stop on ``close()``
(or leaving the ``with`` block). ``LocalS3Server`` needs moto (``pip install
'turbofeed[test]'``).

    with LocalS3Server() as server, FaultProxy(server.endpoint, slowdown=0.1, drop=0.05) as proxy:
        config = S3Config(endpoint_url=proxy.endpoint, access_key_id="test", secret_access_key="test")
"""

from __future__ import annotations

import http.client
import logging
import random
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..base.counters import Counters

if TYPE_CHECKING:
    from moto.server import ThreadedMotoServer

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")
_SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")


class LocalS3Server:
    """moto's S3 in server mode on ``127.0.0.1:port`` (a free port by default).

    By default the server runs in threads of this process, and ``restart(downtime)``
    stops listening, waits, and listens again on the same port; objects survive because
    moto keeps them in this process. ``in_process=False`` runs ``python -m moto.server``
    as a child process instead (benchmarks: the server then does not share this
    process's GIL); its objects are lost on restart.
    """

    def __init__(self, port: int = 0, *, in_process: bool = True) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._cls = ThreadedMotoServer
        self.in_process = in_process
        self.port = port or _free_port()
        self._server: ThreadedMotoServer | None = None
        self._child: subprocess.Popen | None = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if not self.in_process:
            if self._child is None:
                self._child = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                _wait_listening(self.port, self._child)
        elif self._server is None:
            self._server = self._cls(ip_address="127.0.0.1", port=self.port, verbose=False)
            self._server.start()

    def stop(self) -> None:
        if self._child is not None:
            self._child.terminate()
            try:
                self._child.wait(10)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait(10)
            self._child = None
        if self._server is not None:
            self._server.stop()
            inner = getattr(self._server, "_server", None)
            if inner is not None:
                inner.server_close()  # free the port: ThreadedMotoServer.stop keeps it bound
            self._server = None

    def restart(self, downtime: float = 0.0) -> None:
        self.stop()
        time.sleep(downtime)
        self.start()

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> LocalS3Server:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _wait_listening(port: int, child: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"moto.server exited with status {child.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    child.kill()
    raise RuntimeError(f"moto.server did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FaultProxy:
    """An HTTP proxy in front of ``upstream`` that fails a fraction of requests.

    Per request, with the given probabilities (from a seeded RNG): ``drop`` closes the
    connection without an answer; ``slowdown`` answers ``503 SlowDown``; ``truncate``
    forwards the request but cuts the response body in half and closes the connection.
    ``methods`` limits faults to those HTTP methods. ``counts`` says what was injected.
    Set ``enabled = False`` to pass everything through.

    For checks: ``latency`` seconds are added to every forwarded request (so requests
    overlap), ``max_in_flight`` is the most requests the proxy held at once, and
    ``access_keys`` the access key ids that signed requests. ``traffic()`` says how many
    bytes and GETs went to each object (what a node fetched), ``reset_traffic()`` starts
    a new count (per epoch, per phase)::

        with FaultProxy(server.endpoint) as proxy:
            ...                              # read s3://bucket/data/ through proxy.endpoint
            proxy.traffic()["by_object"]["bucket/data/shard-000000.tar"]  # {"gets": 2, "bytes": 46428160}
    """

    def __init__(self, upstream: str, *, drop: float = 0.0, slowdown: float = 0.0,
                 truncate: float = 0.0, seed: int = 0, methods: tuple[str, ...] | None = None,
                 latency: float = 0.0) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port or 80))
        self.rates = {"drop": drop, "slowdown": slowdown, "truncate": truncate}
        self.methods = methods
        self.latency = latency
        self.enabled = True
        self._counts = Counters("requests", "drop", "slowdown", "truncate")
        self.in_flight = 0
        self.max_in_flight = 0
        self.access_keys: set[str] = set()
        self._bytes = self._gets = 0
        self._by_object: dict[str, dict[str, int]] = {}
        self._connections: set[socket.socket] = set()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(_ProxyHandler):
            owner = proxy

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="turbofeed-test-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def counts(self) -> dict[str, int]:
        """Requests seen, and faults injected by kind (``drop``, ``slowdown``, ``truncate``): a copy."""
        return self._counts.as_dict()

    def traffic(self) -> dict[str, Any]:
        """Response body bytes sent and GET requests received since the start or the last
        :meth:`reset_traffic`, in total and per object: a copy, consistent across its fields::

            {"bytes": 3145828, "gets": 2,
             "by_object": {"bucket/some/key": {"gets": 2, "bytes": 3145828}}}

        An object is named ``bucket/key`` (path-style requests, as turbofeed and the test
        clients send; the key URL-decoded, no query); a request to a bucket itself (a
        listing) counts under ``bucket``. Every GET counts once on arrival, ranged or not,
        faulted or not. Bytes are body bytes written back to the client (a truncated body
        by the half sent, a ``503 SlowDown`` by its XML; HEAD answers send none), counted
        just before the write, so a client that has its answer also sees it counted.
        """
        with self._lock:
            return {"bytes": self._bytes, "gets": self._gets,
                    "by_object": {name: dict(counts) for name, counts in self._by_object.items()}}

    def reset_traffic(self) -> dict[str, Any]:
        """Start the traffic counts from zero; returns the counts until now (as :meth:`traffic`),
        taken under the same lock, so no request is counted in both or in neither."""
        with self._lock:
            before = {"bytes": self._bytes, "gets": self._gets, "by_object": self._by_object}
            self._bytes = self._gets = 0
            self._by_object = {}
        return before

    def _count_traffic(self, name: str, *, get: bool = False, sent: int = 0) -> None:
        if not (get or sent):
            return  # an upload or a HEAD: no entry
        with self._lock:
            counts = self._by_object.setdefault(name, {"gets": 0, "bytes": 0})
            counts["gets"] += get
            self._gets += get
            counts["bytes"] += sent
            self._bytes += sent

    def _enter(self, authorization: str | None) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            found = _CREDENTIAL.search(authorization or "")
            if found:
                self.access_keys.add(found.group(1))

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _choose(self, method: str) -> str | None:
        with self._lock:
            self._counts.add("requests")
            if not self.enabled or (self.methods is not None and method not in self.methods):
                return None
            x = self._rng.random()
            for fault, rate in self.rates.items():
                if x < rate:
                    self._counts.add(fault)
                    return fault
                x -= rate
            return None

    def close(self) -> None:
        """Stop listening and cut the open keep-alive connections too, so that, as for
        a server that went away, no request gets through afterwards."""
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            open_connections = list(self._connections)
        for conn in open_connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FaultProxy

    def setup(self) -> None:
        super().setup()
        with self.owner._lock:
            self.owner._connections.add(self.connection)

    def finish(self) -> None:
        with self.owner._lock:
            self.owner._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, *args) -> None:  # quiet
        pass

    def _relay(self) -> None:
        # A request counts as in flight from its arrival until just before its answer
        # is sent: inside the client's own in-flight window, so the proxy never sees
        # more requests at once than the client had.
        self.owner._enter(self.headers.get("Authorization"))
        self._left = False
        try:
            self._relay_counted()
        finally:
            self._leave()

    def _leave(self) -> None:
        if not self._left:
            self._left = True
            self.owner._leave()

    def _send_body(self, payload: bytes) -> None:
        self.owner._count_traffic(self._object, sent=len(payload))
        self.wfile.write(payload)

    def _relay_counted(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        self._object = unquote(urlsplit(self.path).path).strip("/")
        self.owner._count_traffic(self._object, get=self.command == "GET")
        fault = self.owner._choose(self.command)
        if fault == "drop":
            self.close_connection = True
            return
        if fault == "slowdown":
            self._leave()
            self.send_response(503, "Slow Down")
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(_SLOWDOWN)))
            self.end_headers()
            self._send_body(_SLOWDOWN)
            return
        if self.owner.latency:
            time.sleep(self.owner.latency)
        conn = http.client.HTTPConnection(*self.owner.upstream, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "expect")}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        except OSError:
            self.close_connection = True  # upstream down: the client sees a dropped connection
            return
        finally:
            conn.close()
        self._leave()
        self.send_response(resp.status, resp.reason)
        head = self.command == "HEAD"  # keeps the object's Content-Length, sends no body
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "server", "date") and (
                    head or k.lower() != "content-length"):
                self.send_header(k, v)
        if not head:
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if head:
            return
        if fault == "truncate" and len(payload) > 1:
            self._send_body(payload[:len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self._send_body(payload)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay
