"""Helpers for the agent-client tests: fake model APIs, a stand-in MCP server, recorded event streams."""
