"""Claude Code, headless (`claude -p ... --output-format stream-json`), through harness/clients/claude.py.

Its budget is its own (`--max-budget-usd`); its cost is its own figure (`total_cost_usd`). An MCP server
it cannot reach does not stop it (it carries on without the tools), so the init event's server status is
checked and a failed server ends the session as infra_error.
"""

from __future__ import annotations

from ..clients import SessionUsage, claude
from . import SessionContext
from .process import CliAgent, ProcessResult


class ClaudeCodeAgent(CliAgent):
    name = "claude-code"
    client = claude
    key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    own_budget = True

    def extra_env(self, ctx: SessionContext) -> dict[str, str]:
        return {"CLAUDE_CODE_TMPDIR": str(ctx.home / "tmp")}

    def mcp_failure(self, usage: SessionUsage, result: ProcessResult) -> str | None:
        if not usage.mcp_servers and usage.status == "incomplete":
            return None  # it died before its init event: a crash, not a server problem
        status = usage.mcp_servers.get(self.server_name)
        if status == "connected":
            return None
        return (f"Claude Code could not use the crucible MCP server (status {status or 'absent'}); "
                "the session ran without its tools")


AGENT = ClaudeCodeAgent()
