"""The local web server of ``dpsynth view``: three static files and one JSON document, read-only.

Layer: adapter (standard library ``http.server``). ``GET /`` is the page, ``/view.js`` and
``/view.css`` its script and style (package data, no framework, nothing fetched from
elsewhere), ``GET /api/state`` the :class:`~dpsynth.view.state.ViewState` document the page
polls. Nothing else is served: any other path is 404, any method but GET and HEAD 405. It
binds 127.0.0.1 by default; requests naming another host than the bound one or a loopback
name are refused (DNS rebinding), and every response forbids caching and framing.
"""

from __future__ import annotations

import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from dpsynth.view.state import ViewState

log = logging.getLogger(__name__)

#: path → (package file, content type).
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/view.js": ("view.js", "text/javascript; charset=utf-8"),
    "/view.css": ("view.css", "text/css; charset=utf-8"),
}
HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'none'",
}
LOOPBACK = ("127.0.0.1", "localhost", "[::1]", "::1")


def static_file(name: str) -> bytes:
    """A file of the page (``dpsynth/view/static``)."""
    return resources.files("dpsynth.view").joinpath("static", name).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(head=True)

    def _refuse(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only\n", "text/plain", head=False,
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse  # noqa: N815

    def _answer(self, *, head: bool) -> None:
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
        if host not in self.server.allowed_hosts and "*" not in self.server.allowed_hosts:
            self._send(HTTPStatus.MISDIRECTED_REQUEST, b"unknown host\n", "text/plain", head=head)
            return
        path = self.path.split("?", 1)[0]
        if path == "/api/state":
            body = self.server.state.to_json()
            self._send(HTTPStatus.OK, body, "application/json", head=head)
        elif path in STATIC:
            name, kind = STATIC[path]
            self._send(HTTPStatus.OK, self.server.files[name], kind, head=head)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", head=head)

    def _send(self, status: HTTPStatus, body: bytes, kind: str, *, head: bool,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {**HEADERS, **(extra or {}), "Content-Type": kind,
                            "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        log.debug("dpsynth view: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: ViewState
    files: dict[str, bytes]
    allowed_hosts: set[str]


class ViewServer:
    """The page and its document on ``host:port`` (port 0: a free one), in a daemon thread.

    >>> from dpsynth.view.state import ViewState
    >>> server = ViewServer(ViewState("doc")).start()
    >>> server.url.startswith("http://127.0.0.1:")
    True
    >>> server.close()
    """

    def __init__(self, state: ViewState, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = _Server((host, port), _Handler)
        self._server.state = state
        self._server.files = {name: static_file(name) for name, _ in STATIC.values()}
        wildcard = host in ("", "0.0.0.0", "::")  # noqa: S104 - an explicit choice
        self._server.allowed_hosts = {"*"} if wildcard else {host, *LOOPBACK}
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The page's address."""
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host  # noqa: S104
        return f"http://{host}:{self.port}/"

    def start(self) -> ViewServer:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="dpsynth-view-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
