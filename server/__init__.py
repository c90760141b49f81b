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

from .app import build_server
from .http import ServeError, serve_http, serve_stdio, token_from_env
from .session import SessionConfig, ToolLimits

__all__ = ["ServeError", "SessionConfig", "ToolLimits", "build_server", "serve_http", "serve_stdio",
           "token_from_env"]
