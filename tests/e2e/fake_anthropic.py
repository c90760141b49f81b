"""A fake Anthropic Messages API: `POST /v1/messages` (a `?beta=true` query may be added).

Scripted: while the request holds fewer `tool_result` blocks than there are tools, it answers with a
`tool_use` of `mcp__<server>__<tool>` for the next tool (one a request), then with a final text. Each
response reports distinct usage numbers, kept in `reported`, so a test can check the CLI's totals.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from .fake_http import FakeAPI, Reply, sse

FINAL_TEXT = "All five crucible tools answered."


class AnthropicUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


def usage_for(i: int) -> AnthropicUsage:
    """The i-th response's usage: distinct per response so a dropped or doubled one shows in the sums."""
    return AnthropicUsage(input_tokens=1000 + 17 * i, output_tokens=40 + 3 * i,
                          cache_read_input_tokens=200 * i, cache_creation_input_tokens=50 + i)


class FakeAnthropic(FakeAPI):
    def __init__(self, tools: Sequence[str], server: str = "crucible",
                 tool_args: Mapping[str, dict[str, Any]] | None = None, lifetime_s: float = 120.0) -> None:
        super().__init__(lifetime_s)
        self.tools = list(tools)
        self.server = server
        self.tool_args = dict(tool_args or {})
        self.reported: list[AnthropicUsage] = []
        self._ids = itertools.count(1)

    def answer(self, method: str, path: str, body: Any) -> Reply:
        if method == "POST" and path == "/v1/messages/count_tokens":
            return Reply(body=json.dumps({"input_tokens": 100}))
        if method != "POST" or path != "/v1/messages" or not isinstance(body, dict):
            return Reply(status=404, body=json.dumps({"type": "error", "error": {
                "type": "not_found_error", "message": f"fake: no {method} {path}"}}))
        offered = {t.get("name") for t in body.get("tools") or []}
        done = sum(1 for m in body.get("messages", []) if isinstance(m.get("content"), list)
                   for b in m["content"] if b.get("type") == "tool_result")
        usage = usage_for(len(self.reported))
        self.reported.append(usage)
        msg_id = f"msg_fake_{next(self._ids)}"
        name = f"mcp__{self.server}__{self.tools[done]}" if done < len(self.tools) else None
        if name is not None and name in offered:
            block: dict[str, Any] = {"type": "tool_use", "id": f"toolu_fake_{next(self._ids)}", "name": name,
                                     "input": {}}
            delta = {"type": "input_json_delta",
                     "partial_json": json.dumps(self.tool_args.get(self.tools[done], {}))}
            stop = "tool_use"
        else:  # done, or a side request that offers no crucible tools (a title, a probe)
            block, delta, stop = {"type": "text", "text": ""}, {"type": "text_delta", "text": FINAL_TEXT}, "end_turn"
        model = body.get("model", "claude-sonnet-4-5")
        if not body.get("stream"):
            full = dict(block, input=json.loads(delta["partial_json"])) if stop == "tool_use" \
                else {"type": "text", "text": FINAL_TEXT}
            return Reply(body=json.dumps({"id": msg_id, "type": "message", "role": "assistant", "model": model,
                                          "content": [full], "stop_reason": stop, "stop_sequence": None,
                                          "usage": usage.model_dump()}))
        start_usage = usage.model_dump() | {"output_tokens": 1}
        return sse([
            ("message_start", {"type": "message_start", "message": {
                "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": start_usage}}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            # The real API's message_delta usage is cumulative for the response.
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": usage.model_dump()}),
            ("message_stop", {"type": "message_stop"}),
        ])

    def totals(self) -> AnthropicUsage:
        return AnthropicUsage(**{k: sum(getattr(u, k) for u in self.reported)
                                 for k in AnthropicUsage.model_fields})

    def tool_results(self) -> dict[str, str]:
        """Tool name -> the text of its result, as the client sent it back in the last request."""
        last = next(r.body for r in reversed(self.requests) if r.path.startswith("/v1/messages")
                    and isinstance(r.body, dict) and r.body.get("messages"))
        names: dict[str, str] = {}
        results: dict[str, str] = {}
        for message in last["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_use":
                    names[block["id"]] = block["name"].split("__")[-1]
                elif block.get("type") == "tool_result":
                    content = block.get("content")
                    text = content if isinstance(content, str) else \
                        "".join(c.get("text", "") for c in content or [] if isinstance(c, dict))
                    results[names.get(block["tool_use_id"], "?")] = text
        return results
