"""Cursor's agent CLI (`agent -p --output-format stream-json`), through harness/clients/cursor.py.

Its config goes into the workspace (`.cursor/mcp.json`, the only place it reads besides the user's
~/.cursor), with the token by variable name. It talks only to Cursor's servers (CURSOR_API_KEY) and
reports tokens but no cost: the price table prices them, and the stream is watched against the budget
(in practice its usage arrives with the final event, so a budget is checked once, at the end).
"""

from __future__ import annotations

from ..clients import cursor
from .process import CliAgent


class CursorAgent(CliAgent):
    name = "cursor"
    client = cursor
    key_env = "CURSOR_API_KEY"
    binaries = ("agent", "cursor-agent")


AGENT = CursorAgent()
