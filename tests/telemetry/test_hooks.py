"""Signed middleware hooks: same behaviour and the bound method's own signature."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from spanpoint._hooks import WRAP_HOOKS, sign_hooks
from spanpoint.calls.middleware import CheckpointMiddleware
from spanpoint.guard import GuardMiddleware


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        self.calls.append(("model", request))
        return handler(request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        self.calls.append(("amodel", request))
        return await handler(request)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


def test_signed_hooks_behave_the_same_and_show_the_bound_signature() -> None:
    recorder = Recorder()
    sign_hooks(recorder)
    for name in WRAP_HOOKS:
        hook = getattr(recorder, name)
        assert not inspect.ismethod(hook)  # a plain function: no per-call signature work
        assert list(inspect.signature(hook).parameters) == ["request", "handler"]
    assert recorder.wrap_model_call("req", lambda r: r + "!") == "req!"

    async def handler(request: str) -> str:
        return request + "?"

    assert asyncio.run(recorder.awrap_model_call("areq", handler)) == "areq?"
    assert recorder.calls == [("model", "req"), ("amodel", "areq")]


def test_spanpoint_middlewares_hand_langchain_signed_hooks() -> None:
    for middleware, names in (
        (CheckpointMiddleware(), WRAP_HOOKS),
        (GuardMiddleware(), ("wrap_model_call", "awrap_model_call")),
    ):
        for name in names:
            hook = getattr(middleware, name)
            assert "__signature__" in vars(hook), (type(middleware).__name__, name)
            assert list(inspect.signature(hook).parameters) == ["request", "handler"]
