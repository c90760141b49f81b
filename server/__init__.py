"""The MCP face of crucible: five tools over the engine, a session ledger, stdio and HTTP transports.

    session.py       SessionConfig: task, workspace, ledger, backend, per-tool time limits
    app.py           build_server(session) and the five tools
    models.py        the tools' argument types and result models (their MCP schemas)
    task_view.py     what get_task shows (the visible task only)
    engine_calls.py  engine calls in a thread: progress, cancellation, time limits
    ledger.py        the session's audit trail (SQLite)
    http.py          serving: stdio, or streamable HTTP behind a bearer token
    instructions.py  what the server tells an agent about how to work
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and editors
    from .app import build_server
    from .http import ServeError, serve_http, serve_stdio, token_from_env
    from .session import SessionConfig, ToolLimits

# Loaded on first use, so that importing a light module of this package (the ledger's row models, which the
# harness's store shares) does not pull in the MCP SDK and the engine.
_EXPORTS = {"build_server": "app", "ServeError": "http", "serve_http": "http", "serve_stdio": "http",
            "token_from_env": "http", "SessionConfig": "session", "ToolLimits": "session"}
__all__ = ["ServeError", "SessionConfig", "ToolLimits", "build_server", "serve_http", "serve_stdio",
           "token_from_env"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
