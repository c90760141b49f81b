"""A fake OpenAI Responses API: `POST /v1/responses` answered with server-sent events.

Scripted like fake_anthropic: while the request's input holds fewer `function_call_output` items than
there are tools, it answers with a `function_call` of the next tool in namespace `mcp__<server>` (when
the request offers it), then with a final message. Each response reports distinct usage numbers, kept in `reported`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from .fake_http import FakeAPI, Reply, sse

FINAL_TEXT = "All five crucible tools answered."


class OpenAIUsage(BaseModel):
    input_tokens: int
    cached_tokens: int
    """Part of input_tokens."""
    output_tokens: int
    reasoning_tokens: int
    """Part of output_tokens."""


def usage_for(i: int) -> OpenAIUsage:
    return OpenAIUsage(input_tokens=2000 + 31 * i, cached_tokens=300 * i, output_tokens=60 + 7 * i,
                       reasoning_tokens=5 + i)


class FakeOpenAI(FakeAPI):
    def __init__(self, tools: Sequence[str], server: str = "crucible",
                 tool_args: Mapping[str, dict[str, Any]] | None = None, lifetime_s: float = 120.0) -> None:
        super().__init__(lifetime_s)
        self.tools = list(tools)
        self.server = server
        self.tool_args = dict(tool_args or {})
        self.reported: list[OpenAIUsage] = []
        self._ids = itertools.count(1)

    def answer(self, method: str, path: str, body: Any) -> Reply:
        if method == "GET" and path == "/v1/models":
            return Reply(body=json.dumps({"object": "list", "data": []}))
        if method != "POST" or path != "/v1/responses" or not isinstance(body, dict):
            return Reply(status=404, body=json.dumps({"error": {"message": f"fake: no {method} {path}"}}))
        offered = {(ns.get("name"), t.get("name")) for ns in body.get("tools") or []
                   if ns.get("type") == "namespace" for t in ns.get("tools") or []}
        items = body.get("input") or []
        done = sum(1 for it in items if isinstance(it, dict) and it.get("type") == "function_call_output")
        usage = usage_for(len(self.reported))
        self.reported.append(usage)
        resp_id = f"resp_fake_{next(self._ids)}"
        if done < len(self.tools) and (f"mcp__{self.server}", self.tools[done]) in offered:
            tool = self.tools[done]
            item: dict[str, Any] = {"type": "function_call", "id": f"fc_fake_{next(self._ids)}",
                                    "call_id": f"call_fake_{next(self._ids)}",
                                    "namespace": f"mcp__{self.server}", "name": tool,
                                    "arguments": json.dumps(self.tool_args.get(tool, {}))}
        else:
            item = {"type": "message", "id": f"msg_fake_{next(self._ids)}", "role": "assistant",
                    "content": [{"type": "output_text", "text": FINAL_TEXT, "annotations": []}]}
        response: dict[str, Any] = {"id": resp_id, "object": "response", "model": body.get("model"), "status": "in_progress",
                    "output": []}
        usage_json = {"input_tokens": usage.input_tokens,
                      "input_tokens_details": {"cached_tokens": usage.cached_tokens},
                      "output_tokens": usage.output_tokens,
                      "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
                      "total_tokens": usage.input_tokens + usage.output_tokens}
        return sse([
            ("response.created", {"type": "response.created", "response": response}),
            ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                            "item": item | {"status": "in_progress"}}),
            ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                           "item": item | {"status": "completed"}}),
            ("response.completed", {"type": "response.completed", "response": response | {
                "status": "completed", "output": [item], "usage": usage_json}}),
        ])

    def totals(self) -> OpenAIUsage:
        return OpenAIUsage(**{k: sum(getattr(u, k) for u in self.reported) for k in OpenAIUsage.model_fields})

    def tool_results(self) -> dict[str, str]:
        """Tool name -> its output, as the client sent it back in the last request."""
        last = next(r.body for r in reversed(self.requests) if r.path.startswith("/v1/responses")
                    and isinstance(r.body, dict))
        names: dict[str, str] = {}
        results: dict[str, str] = {}
        for it in last.get("input") or []:
            if it.get("type") == "function_call":
                names[it["call_id"]] = it["name"]
            elif it.get("type") == "function_call_output":
                out = it.get("output")
                results[names.get(it["call_id"], "?")] = out if isinstance(out, str) else json.dumps(out)
        return results
