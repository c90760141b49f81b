"""Serving: stdio, or streamable HTTP at `/mcp` behind a bearer token.

Over HTTP every request must carry `Authorization: Bearer <token>` (compared in constant time; 401
otherwise). The token comes from an environment variable, never a command-line argument (those show in
`ps`), and the server listens on 127.0.0.1 unless told otherwise: in a harness run the agent's sandbox
shares the host's loopback, and the token is what keeps other local processes out.
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

MIN_TOKEN_CHARS = 16
DEFAULT_TOKEN_ENV = "CRUCIBLE_MCP_TOKEN"


class ServeError(Exception):
    """The server cannot start as asked; the message says what to do."""


def token_from_env(name: str = DEFAULT_TOKEN_ENV) -> str:
    token = os.environ.get(name, "").strip()
    how = (f"set {name} to a random secret, e.g. `export {name}=$(python3 -c 'import secrets; "
           f"print(secrets.token_urlsafe(32))')`, and give clients the header `Authorization: Bearer ${name}`")
    if not token:
        raise ServeError(f"serving over HTTP needs a bearer token and {name} is not set: {how}")
    if len(token) < MIN_TOKEN_CHARS:
        raise ServeError(f"the token in {name} is too short ({len(token)} characters; at least "
                         f"{MIN_TOKEN_CHARS}): {how}")
    return token


class BearerAuth:
    """ASGI middleware: every HTTP request needs the bearer token (lifespan events pass through)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": "unauthorized",
                           "message": "send the session's token as `Authorization: Bearer <token>`"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def _authorized(self, scope: Scope) -> bool:
        if scope["type"] != "http":
            return False
        header = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
        scheme, _, value = header.partition(b" ")
        # compare_digest on equal-length inputs takes the same time whatever the content; a length
        # mismatch returns early but reveals only the length.
        return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self._token)


def http_app(server: MCPServer, token: str, host: str) -> ASGIApp:
    return BearerAuth(server.streamable_http_app(streamable_http_path="/mcp", host=host), token)


def serve_http(server: MCPServer, *, host: str, port: int, token: str, banner: str = "") -> None:
    """Serve until interrupted. Binds first, so `--port 0` works and the address printed is the real one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # clients that connect before uvicorn starts wait in the backlog
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port "
                         "(0 lets the system choose)") from None
    bound_port = sock.getsockname()[1]
    if host not in ("127.0.0.1", "::1", "localhost"):
        print(f"crucible: warning: listening on {host}, not loopback: anyone who can reach this address "
              "and has the token can use the tools", file=sys.stderr)
    shown = f"[{host}]" if ":" in host else host
    print(f"crucible: {banner}serving MCP on http://{shown}:{bound_port}/mcp", file=sys.stderr, flush=True)
    config = uvicorn.Config(http_app(server, token, host), log_level="warning", lifespan="on")
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))


def serve_stdio(server: MCPServer) -> None:
    server.run("stdio")
