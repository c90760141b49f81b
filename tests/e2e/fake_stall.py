"""Fake model APIs that never answer (until they close): for time-limit tests. The request is recorded,
then the handler waits, as a model that hangs would."""

from __future__ import annotations

import threading
from typing import Any

from .fake_anthropic import FakeAnthropic
from .fake_http import Reply
from .fake_openai import FakeOpenAI


class _Stall:
    def __init__(self) -> None:
        self.released = threading.Event()

    def stall(self) -> Reply:
        self.released.wait(timeout=60)
        return Reply(status=503, body='{"error": {"message": "fake: stalled"}}')


class StallingAnthropic(FakeAnthropic, _Stall):
    def __init__(self) -> None:
        FakeAnthropic.__init__(self, ())
        _Stall.__init__(self)

    def answer(self, method: str, path: str, body: Any) -> Reply:
        return self.stall()

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        super().__exit__(*exc)


class StallingOpenAI(FakeOpenAI, _Stall):
    def __init__(self) -> None:
        FakeOpenAI.__init__(self, ())
        _Stall.__init__(self)

    def answer(self, method: str, path: str, body: Any) -> Reply:
        return self.stall()

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        super().__exit__(*exc)
