"""Real servers on 127.0.0.1 for the object store tests: an HTTP file server with Range,
ETag and If-Match (Python's http.server has no Range), the ``gcp-storage-emulator`` (GCS)
and Azurite (Azure Blob, from npm, in ``.tools/``). Each is started by a fixture and
stopped after; ``stop()`` mid-test is an outage."""

from __future__ import annotations

import base64
import datetime
import email.utils
import hashlib
import hmac
import html
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from builders import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
AZURITE = os.path.join(REPO, ".tools", "node_modules", ".bin", "azurite-blob")
# Azurite's well-known development account (public, documented by Microsoft).
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _wait_port(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def tracked_handler(owner: Any) -> type[BaseHTTPRequestHandler]:
    """A quiet HTTP/1.1 request handler whose connections ``owner._open`` holds (so that
    stopping the server can close them), with Nagle off."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            owner._open.add(self.connection)
            # headers and body go out in separate writes: without this, Nagle and
            # delayed ACKs add ~40 ms to every response
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    return Handler


def serve(port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1:``port``, serving ``handler`` from a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop_serving(server: ThreadingHTTPServer | None, open_conns: set[socket.socket]) -> None:
    """Stop ``server`` (None: stopped already) and cut the keep-alive connections its
    :func:`tracked_handler` recorded, so that no client waits on one."""
    if server is not None:
        server.shutdown()
        server.server_close()
    for conn in list(open_conns):
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    open_conns.clear()


def end_process(proc: subprocess.Popen | None) -> None:
    """Terminate an emulator's process (None: ended already), killing it after 10 s."""
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

class RangeHTTPServer:
    """Serves ``files`` (path -> bytes) over HTTP/1.1 with ``Range``, ``ETag`` (the content's
    digest), ``Last-Modified`` (a time of its own per version, as a rewritten file's mtime),
    ``If-Match`` (412 on another version, and on any tag but ``*`` when the server has no
    strong ETag to compare, as RFC 9110 says) and ``HEAD``; ``stop()``/``start()`` on the
    same port. ``etags`` and ``last_modified`` make it a server that sends less, as nginx
    with ``etag off``, Express (weak ETags) or a bare range server do."""

    def __init__(self, token: str | None = None, *, etags: str | None = "strong",
                 last_modified: bool = True) -> None:
        self.files: dict[str, bytes] = {}
        self.token = token  # set: requests need "Authorization: Bearer <token>" (else 401)
        self.etags = etags  # "strong", "weak" (W/"...") or None (no ETag header)
        self.last_modified = last_modified
        self.requests = 0
        self._open: set[socket.socket] = set()  # keep-alive connections, cut by stop()
        self.port = free_port()
        self._server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        owner = self

        class Handler(tracked_handler(owner)):

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                owner.requests += 1
                data = owner.files.get(self.path.split("?", 1)[0])
                if owner.token and self.headers.get("Authorization") != f"Bearer {owner.token}":
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                digest = hashlib.md5(data).hexdigest()
                etag = f'"{digest}"'
                matches = (None, "*", etag) if owner.etags == "strong" else (None, "*")
                if self.headers.get("If-Match") not in matches:
                    self.send_response(412)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start, end, status = 0, len(data), 200
                ranged = self.headers.get("Range")
                if ranged and ranged.startswith("bytes="):
                    first, _, last = ranged[6:].partition("-")
                    start = int(first)
                    end = min(len(data), int(last) + 1) if last else len(data)
                    status = 206
                self.send_response(status)
                self.send_header("Content-Length", str(end - start))
                if owner.etags is not None:
                    self.send_header("ETag", etag if owner.etags == "strong" else f"W/{etag}")
                if owner.last_modified:  # a second of its own per version: no sleep between versions
                    when = 1_600_000_000 + int(digest[:6], 16)
                    self.send_header("Last-Modified", email.utils.formatdate(when, usegmt=True))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                self.end_headers()
                if body:
                    self.wfile.write(data[start:end])

        self._server = serve(self.port, Handler)

    def stop(self) -> None:
        stop_serving(self._server, self._open)
        self._server = None

    def close(self) -> None:
        self.stop()


class GCSEmulator:
    """``gcp-storage-emulator`` (PyPI) as a child process, in memory, behind a small front
    on its own port (``endpoint``).

    The emulator implements GCS's JSON API and, of the XML API that obstore (like
    object_store) speaks, only GET and PUT of an object, without the ``ETag`` header; the
    front answers the rest of the XML API from the emulator's JSON API: ``HEAD`` (size,
    ETag, time), the bucket listing (``list-type=2``, as ListBucketResult XML), ``ETag``
    and ``If-Match`` on GET and PUT. Bytes are stored and served by the emulator; no
    real GCS can run here, and no other GCS emulator is on PyPI.
    """

    def __init__(self) -> None:
        exe = shutil.which("gcp-storage-emulator", path=os.path.dirname(sys.executable))
        if exe is None:
            raise RuntimeError("gcp-storage-emulator is not installed (pip install gcp-storage-emulator)")
        self.backend_port = free_port()
        self._proc: subprocess.Popen | None = subprocess.Popen(
            [exe, "start", "--host", "127.0.0.1", "--port", str(self.backend_port), "--in-memory"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(self.backend_port, proc=self._proc)
        self.requests = 0
        self._open: set[socket.socket] = set()
        self.port = free_port()
        self._front: ThreadingHTTPServer | None = serve(self.port, self._handler())

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def create_bucket(self, name: str) -> None:
        req = urllib.request.Request(f"http://127.0.0.1:{self.backend_port}/storage/v1/b?project=test",
                                     method="POST", data=json.dumps({"name": name}).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def _handler(self):
        owner = self
        backend = f"http://127.0.0.1:{self.backend_port}"

        def call(method: str, path: str, data: bytes | None = None, headers: dict | None = None):
            req = urllib.request.Request(backend + path, method=method, data=data, headers=headers or {})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    return resp.status, dict(resp.headers), resp.read()
            except urllib.error.HTTPError as exc:
                return exc.code, dict(exc.headers), exc.read()

        def meta(bucket: str, name: str) -> dict | None:
            status, _, body = call("GET", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}")
            return json.loads(body) if status == 200 else None

        class Handler(tracked_handler(owner)):

            def reply(self, status: int, headers: dict | None = None, body: bytes = b"") -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body:
                    self.wfile.write(body)

            def target(self):
                parts = urllib.parse.urlsplit(self.path)
                bucket, _, name = parts.path.lstrip("/").partition("/")
                return bucket, urllib.parse.unquote(name), urllib.parse.parse_qs(parts.query)

            def object_headers(self, obj: dict) -> dict:
                updated = obj.get("updated", "2020-01-01T00:00:00Z")
                when = email.utils.format_datetime(
                    datetime.datetime.fromisoformat(updated.replace("Z", "+00:00")), usegmt=True)
                return {"ETag": f'"{obj["md5Hash"]}"', "Last-Modified": when}

            def do_HEAD(self) -> None:
                owner.requests += 1
                bucket, name, _ = self.target()
                obj = meta(bucket, name)
                if obj is None:
                    return self.reply(404)
                self.send_response(200)
                for k, v in self.object_headers(obj).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(obj["size"]))
                self.end_headers()

            def do_GET(self) -> None:
                owner.requests += 1
                bucket, name, query = self.target()
                if not name:  # the XML API's listing, from the JSON API's
                    prefix = query.get("prefix", [""])[0]
                    status, _, body = call("GET", f"/storage/v1/b/{bucket}/o?prefix={urllib.parse.quote(prefix)}")
                    if status != 200:
                        return self.reply(status)
                    items = json.loads(body).get("items", [])
                    xml = "".join(
                        f"<Contents><Key>{html.escape(o['name'])}</Key><Size>{o['size']}</Size>"
                        f"<LastModified>{o.get('updated', '2020-01-01T00:00:00Z')}</LastModified>"
                        f"<ETag>&quot;{o['md5Hash']}&quot;</ETag></Contents>" for o in items)
                    doc = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{bucket}</Name>'
                           f"<Prefix>{html.escape(prefix)}</Prefix><KeyCount>{len(items)}</KeyCount>"
                           f"<IsTruncated>false</IsTruncated>{xml}</ListBucketResult>").encode()
                    return self.reply(200, {"Content-Type": "application/xml"}, doc)
                obj = meta(bucket, name)
                if obj is None:
                    return self.reply(404)
                headers = self.object_headers(obj)
                if self.headers.get("If-Match") not in (None, "*", headers["ETag"]):
                    return self.reply(412)
                fwd = {"Range": self.headers["Range"]} if self.headers.get("Range") else {}
                status, got, body = call("GET", f"/{bucket}/{urllib.parse.quote(name)}", headers=fwd)
                if "Content-Range" in got:
                    headers["Content-Range"] = got["Content-Range"]
                self.reply(status, headers, body)

            def do_PUT(self) -> None:
                owner.requests += 1
                bucket, name, _ = self.target()
                data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, _, _ = call("PUT", f"/{bucket}/{urllib.parse.quote(name)}", data=data,
                                    headers={"Content-Type": "application/octet-stream"})
                obj = meta(bucket, name) if status == 200 else None
                self.reply(status, self.object_headers(obj) if obj else {})

        return Handler

    def stop(self) -> None:
        stop_serving(self._front, self._open)
        self._front = None
        end_process(self._proc)
        self._proc = None

    close = stop


class Azurite:
    """Azurite's blob service (npm, installed in ``.tools/`` by scripts/setup.sh) as a
    child process, in memory."""

    def __init__(self, workdir: str) -> None:
        if not os.path.exists(AZURITE):
            raise RuntimeError(f"Azurite is not installed ({AZURITE} missing: "
                               "cd .tools && npm install azurite)")
        self.port = free_port()
        self._proc: subprocess.Popen | None = subprocess.Popen(
            [AZURITE, "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--inMemoryPersistence",
             "--skipApiVersionCheck", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir)
        _wait_port(self.port, proc=self._proc)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{AZ_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={AZ_ACCOUNT};AccountKey={AZ_KEY};"
                f"BlobEndpoint={self.endpoint};")

    def create_container(self, name: str) -> None:
        """PUT ?restype=container, signed with the account key (Azure's SharedKey scheme)."""
        date = email.utils.formatdate(usegmt=True)
        version = "2021-08-06"
        canonical_headers = f"x-ms-date:{date}\nx-ms-version:{version}\n"
        canonical_resource = f"/{AZ_ACCOUNT}/{AZ_ACCOUNT}/{name}\nrestype:container"
        ctype = "application/octet-stream"
        to_sign = "\n".join(["PUT", "", "", "", "", ctype, "", "", "", "", "", ""]) + "\n" \
            + canonical_headers + canonical_resource
        signature = base64.b64encode(hmac.new(base64.b64decode(AZ_KEY), to_sign.encode(),
                                              hashlib.sha256).digest()).decode()
        req = urllib.request.Request(f"{self.endpoint}/{name}?restype=container", method="PUT", data=b"",
                                     headers={"x-ms-date": date, "x-ms-version": version, "Content-Type": ctype,
                                              "Authorization": f"SharedKey {AZ_ACCOUNT}:{signature}"})
        urllib.request.urlopen(req, timeout=10).read()

    def stop(self) -> None:
        end_process(self._proc)
        self._proc = None

    close = stop
