"""Codex (`codex exec --json`), through harness/clients/codex.py.

The model provider is written into CODEX_HOME/config.toml, so the key comes from OPENAI_API_KEY and the
endpoint from CRUCIBLE_OPENAI_BASE_URL when set (tests point it at a fake). Codex reports tokens but no
cost and has no budget flag: the cost comes from the price table, and the stream is watched against the
budget. The MCP server is `required`, so Codex stops when it cannot reach it; that ends as infra_error.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..clients import SessionUsage, codex
from ..clients.codex import toml_table, toml_value
from . import SessionContext
from .process import CliAgent, ProcessResult

BASE_URL_ENV = "CRUCIBLE_OPENAI_BASE_URL"
"""An OpenAI-compatible Responses endpoint (`.../v1`) instead of api.openai.com."""
OPENAI_BASE_URL = "https://api.openai.com/v1"
PROVIDER = "crucible-openai"
MESSAGE_CHARS = 600
"""Codex's MCP errors repeat a long chain of transport type names."""


class CodexAgent(CliAgent):
    name = "codex"
    client = codex
    key_env = "OPENAI_API_KEY"
    base_url_env = BASE_URL_ENV

    def config_home(self, ctx: SessionContext) -> Path:
        return ctx.home / ".codex"

    def config_text(self, ctx: SessionContext) -> str:
        base = os.environ.get(BASE_URL_ENV) or OPENAI_BASE_URL
        # Top-level keys first: in TOML they must precede every table.
        head = f"model_provider = {toml_value(PROVIDER)}\n"
        if ctx.config.model:
            head += f"model = {toml_value(ctx.config.model)}\n"
        provider = toml_table(f"model_providers.{PROVIDER}", {
            "name": "OpenAI (crucible)", "base_url": base, "env_key": self.key_env, "wire_api": "responses"})
        return f"{head}\n{provider}\n{super().config_text(ctx)}"

    def api_env(self) -> dict[str, str]:
        return {self.key_env: super().api_env()[self.key_env]}  # the endpoint is in the config, not env

    def command(self, ctx: SessionContext, binary: str, config: Path) -> list[str]:
        cmd = super().command(ctx, binary, config)
        if ctx.sandbox_prefix:
            # Inside our sandbox Codex's own one (Landlock + seccomp, or a nested bubblewrap) is redundant
            # and may not start without capabilities; ours confines it to the same folders.
            at = cmd.index("--sandbox")
            cmd[at + 1] = "danger-full-access"
        return cmd

    def mcp_failure(self, usage: SessionUsage, result: ProcessResult) -> str | None:
        detail = (usage.detail or "").lower()
        if usage.status == "error" and "mcp" in detail:
            return f"Codex could not use the crucible MCP server: {usage.detail[:MESSAGE_CHARS]}"
        tail = result.stderr_tail.lower()
        if result.exit_code not in (0, None) and "mcp" in tail and self.server_name in tail:
            last = result.stderr_tail.strip().splitlines()[-1]
            return f"Codex could not use the crucible MCP server: {last[:MESSAGE_CHARS]}"
        return None


AGENT = CodexAgent()
