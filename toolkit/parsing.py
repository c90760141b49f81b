"""`ast.parse` under one lock per process.

CPython 3.11's parser keeps per-interpreter state that two threads parsing at once can corrupt: the
second gets `SystemError: AST constructor recursion depth mismatch`. The harness parses in threads (sessions
run side by side: task formulas, tripwire scans, Triton sources), so every parse of ours goes through here.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
