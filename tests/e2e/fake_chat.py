"""A fake OpenAI-compatible Chat Completions API: `POST /v1/chat/completions`, for the `api` agent.

Scripted by the number of `tool` messages in the request: get_task, write_file (the fixture task's
expert solution into the kernel file), run_tests, submit, then a final message without tool calls.
A step is asked for only if the request offers that tool. Each response reports distinct usage numbers
(kept in `reported`); `cached_tokens` is part of `prompt_tokens`, as OpenAI counts it.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .fake_http import FakeAPI, Reply

FINAL_TEXT = "Submitted the faster kernel."
SOLUTION = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "triton2triton" / "vadd" / "solution.py"


def default_script() -> list[tuple[str, dict[str, Any]]]:
    return [("get_task", {}), ("write_file", {"path": "kernel.py", "content": SOLUTION.read_text()}),
            ("run_tests", {}), ("submit", {"note": "block 1024"})]


class ChatUsage(BaseModel):
    prompt_tokens: int
    cached_tokens: int
    """Part of prompt_tokens."""
    completion_tokens: int


def usage_for(i: int) -> ChatUsage:
    return ChatUsage(prompt_tokens=1500 + 23 * i, cached_tokens=100 * i, completion_tokens=30 + 11 * i)


class FakeChat(FakeAPI):
    def __init__(self, script: list[tuple[str, dict[str, Any]]] | None = None, lifetime_s: float = 120.0) -> None:
        super().__init__(lifetime_s)
        self.script = default_script() if script is None else script
        self.reported: list[ChatUsage] = []
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def answer(self, method: str, path: str, body: Any) -> Reply:
        if method != "POST" or path != "/v1/chat/completions" or not isinstance(body, dict):
            return Reply(status=404, body=json.dumps({"error": {"message": f"fake: no {method} {path}"}}))
        offered = {t["function"]["name"] for t in body.get("tools") or [] if t.get("type") == "function"}
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        usage = usage_for(len(self.reported))
        self.reported.append(usage)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if done < len(self.script) and self.script[done][0] in offered:
            name, args = self.script[done]
            message["tool_calls"] = [{"id": f"call_fake_{next(self._ids)}", "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(args)}}]
            finish = "tool_calls"
        else:
            message["content"], finish = FINAL_TEXT, "stop"
        return Reply(body=json.dumps({
            "id": f"chatcmpl-fake-{next(self._ids)}", "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                      "total_tokens": usage.prompt_tokens + usage.completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}}}))

    def totals(self) -> ChatUsage:
        return ChatUsage(**{k: sum(getattr(u, k) for u in self.reported) for k in ChatUsage.model_fields})

    def tool_results(self) -> dict[str, str]:
        """Tool name -> the content of its `tool` message, as the agent sent it back in the last request."""
        last = next(r.body for r in reversed(self.requests) if isinstance(r.body, dict) and r.body.get("messages"))
        names = {c["id"]: c["function"]["name"] for m in last["messages"] for c in m.get("tool_calls") or []}
        return {names.get(m["tool_call_id"], "?"): m["content"] for m in last["messages"] if m.get("role") == "tool"}
