"""A small HTTP server on 127.0.0.1 for fake model APIs: a free port, every request recorded, and a
lifetime after which it stops by itself, so a hung client cannot keep it (or a test) alive."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from pydantic import BaseModel


class Recorded(BaseModel):
    method: str
    path: str
    body: Any
    """The JSON body, or None."""
    authorization: str | None
    """The bearer token the client sent (fake keys only), to prove which credential it used."""


class Reply(BaseModel):
    status: int = 200
    content_type: str = "application/json"
    body: str


def sse(events: list[tuple[str, dict[str, Any]]]) -> Reply:
    text = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    return Reply(content_type="text/event-stream", body=text)


class FakeAPI:
    """Subclasses implement `answer(method, path, body) -> Reply`. Use as a context manager."""

    def __init__(self, lifetime_s: float = 120.0) -> None:
        self.requests: list[Recorded] = []
        self.lifetime_s = lifetime_s
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except json.JSONDecodeError:
                    body = None
                auth = self.headers.get("Authorization") or self.headers.get("x-api-key")
                with api._lock:
                    api.requests.append(Recorded(method=self.command, path=self.path, body=body,
                                                 authorization=auth))
                    reply = api.answer(self.command, self.path.split("?")[0], body)
                data = reply.body.encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _handle  # noqa: N815

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._timer = threading.Timer(lifetime_s, self._server.shutdown)
        self._timer.daemon = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, method: str, path: str, body: Any) -> Reply:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
