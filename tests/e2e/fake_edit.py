"""Fake model APIs that make the CLI use its own file tool once, then finish: Claude Code's `Write`, Codex's
`exec_command` (its shell). Proof that a CLI's built-in editing works inside the agent sandbox."""

from __future__ import annotations

import json
from typing import Any

from .fake_anthropic import AnthropicUsage, FakeAnthropic
from .fake_http import Reply, sse
from .fake_openai import FakeOpenAI

NOTE = "note.txt"
TEXT = "edited inside the sandbox"


def _usage() -> dict[str, int]:
    return AnthropicUsage(input_tokens=10, output_tokens=5, cache_read_input_tokens=0,
                          cache_creation_input_tokens=0).model_dump()


class WritingAnthropic(FakeAnthropic):
    """Asks for `Write {workspace}/note.txt` while the request holds no tool_result, then says done."""

    def __init__(self, workspace: str) -> None:
        super().__init__(())
        self.workspace = workspace

    def answer(self, method: str, path: str, body: Any) -> Reply:
        if method != "POST" or path != "/v1/messages" or not isinstance(body, dict) or not body.get("stream"):
            return super().answer(method, path, body)
        offered = {t.get("name") for t in body.get("tools") or []}
        done = any(b.get("type") == "tool_result" for m in body.get("messages", [])
                   if isinstance(m.get("content"), list) for b in m["content"])
        if not done and "Write" in offered:
            args = {"file_path": f"{self.workspace}/{NOTE}", "content": TEXT}
            block: dict[str, Any] = {"type": "tool_use", "id": "toolu_write_1", "name": "Write", "input": {}}
            delta, stop = {"type": "input_json_delta", "partial_json": json.dumps(args)}, "tool_use"
        else:
            block, delta, stop = {"type": "text", "text": ""}, {"type": "text_delta", "text": "done"}, "end_turn"
        message = {"id": "msg_write", "type": "message", "role": "assistant", "model": body.get("model"),
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": _usage()}
        return sse([("message_start", {"type": "message_start", "message": message}),
                    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop},
                                       "usage": _usage()}),
                    ("message_stop", {"type": "message_stop"})])


class ShellOpenAI(FakeOpenAI):
    """Asks for `exec_command` writing note.txt in the working folder, then says done."""

    def __init__(self) -> None:
        super().__init__(())
        self.outputs: list[str] = []

    def answer(self, method: str, path: str, body: Any) -> Reply:
        if method != "POST" or path != "/v1/responses" or not isinstance(body, dict):
            return super().answer(method, path, body)
        outputs = [it for it in body.get("input") or [] if isinstance(it, dict)
                   and it.get("type") == "function_call_output"]
        self.outputs = [o["output"] if isinstance(o.get("output"), str) else json.dumps(o.get("output"))
                        for o in outputs]
        if not outputs:
            item: dict[str, Any] = {"type": "function_call", "id": "fc_shell", "call_id": "call_shell",
                                    "name": "exec_command",
                                    "arguments": json.dumps({"cmd": f"echo '{TEXT}' > {NOTE} && cat {NOTE}"})}
        else:
            item = {"type": "message", "id": "msg_done", "role": "assistant",
                    "content": [{"type": "output_text", "text": "done", "annotations": []}]}
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
        response = {"id": "resp_shell", "object": "response", "model": body.get("model"), "output": []}
        return sse([("response.created", {"type": "response.created", "response": response | {"status": "in_progress"}}),
                    ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0,
                                                    "item": item | {"status": "in_progress"}}),
                    ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0,
                                                   "item": item | {"status": "completed"}}),
                    ("response.completed", {"type": "response.completed", "response": response | {
                        "status": "completed", "output": [item], "usage": usage}})])
