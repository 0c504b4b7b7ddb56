"""Beside the official LangChain instrumentation: one ``chat`` span per model call.

``opentelemetry-instrumentation-genai-langchain`` (with ``opentelemetry-util-genai``) opens a
``chat`` span from its callback handler's ``on_chat_model_start`` and an ``execute_tool`` span
from its ``on_tool_start``. spanpoint opens its own around the same calls (the model and tool
seams, ``CheckpointMiddleware``). Both active would give two spans per call, and a replayed
call would get an official span for a request that was never sent.

The rule is **suppress**: for a call that spanpoint traces, spanpoint's span is the one kept
(it is the replay boundary whose end commits the checkpoint, and it carries the replay and
cost attributes), and the official handler starts no invocation for it (no span, no metric
point). Everything else of the official instrumentation is left as it is: its
``invoke_agent`` / ``invoke_workflow`` spans, retrievers, and the calls spanpoint does not
trace (a graph run by a ``GraphRunner`` with the ``graph_call`` strategy, an explicit
``model.stream()``, which never passes the model seam).

How each callback tells:

- ``on_tool_start`` fires inside ``BaseTool.run``, which the tool seam (or the middleware's
  boundary) already wraps: spanpoint's ``execute_tool`` span of that tool is current.
- ``on_chat_model_start`` fires inside ``BaseChatModel.generate`` *before* the model seam
  runs. It is skipped when spanpoint's ``chat`` span is already around the call (the
  middleware), or when the call comes from ``generate`` / ``agenerate`` (marked in a context
  variable) and the seam, deciding from the same context a moment later, will open one.

A replayed call: the middleware never calls the model; the seam returns the stored result
after the callback was skipped, so the official ``on_llm_end`` finds no invocation to end.

The hook is applied when the official callback handler's module is imported (a wrapt
post-import hook, or at once when it is loaded already), through spanpoint's one patch
registry: ``BaseChatModel.generate`` / ``agenerate`` and the handler's two start callbacks.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from wrapt import register_post_import_hook

from spanpoint._patches import PatchSet
from spanpoint.calls import seams

#: The official instrumentation's LangChain callback handler.
HANDLER_MODULE = "opentelemetry.instrumentation.genai.langchain.callback_handler"
HANDLER_CLASS = "OpenTelemetryLangChainCallbackHandler"

#: True inside ``BaseChatModel.generate`` / ``agenerate``: a model call started here passes
#: the model seam next (an explicit ``stream`` does not).
_GENERATING: ContextVar[bool] = ContextVar("spanpoint_official_generating", default=False)


def _generate(original: Callable[..., Any]) -> Callable[..., Any]:
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _GENERATING.set(True)
        try:
            return original(self, *args, **kwargs)
        finally:
            _GENERATING.reset(token)

    return generate


def _agenerate(original: Callable[..., Any]) -> Callable[..., Any]:
    async def agenerate(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _GENERATING.set(True)
        try:
            return await original(self, *args, **kwargs)
        finally:
            _GENERATING.reset(token)

    return agenerate


def _on_chat_model_start(original: Callable[..., Any]) -> Callable[..., Any]:
    def on_chat_model_start(self: Any, *args: Any, **kwargs: Any) -> Any:
        if seams.model_call_traced(reaches_seam=_GENERATING.get()):
            return None
        return original(self, *args, **kwargs)

    return on_chat_model_start


def _on_tool_start(original: Callable[..., Any]) -> Callable[..., Any]:
    def on_tool_start(self: Any, *args: Any, **kwargs: Any) -> Any:
        serialized = args[0] if args else kwargs.get("serialized")
        name = serialized.get("name") if isinstance(serialized, dict) else None
        if name and seams.tool_call_traced(str(name)):
            return None
        return original(self, *args, **kwargs)

    return on_tool_start


def _targets() -> list[tuple[type, str, Callable[[Any], Any]]]:
    # For import time: with the official instrumentation, which loads langchain-core.
    from langchain_core.language_models.chat_models import BaseChatModel

    handler = getattr(importlib.import_module(HANDLER_MODULE), HANDLER_CLASS)
    return [
        (BaseChatModel, "generate", _generate),
        (BaseChatModel, "agenerate", _agenerate),
        (handler, "on_chat_model_start", _on_chat_model_start),
        (handler, "on_tool_start", _on_tool_start),
    ]


#: The official handler's start callbacks and the ``generate`` marker, in spanpoint's one patch
#: registry: applied when the official instrumentation is imported, and always on (each
#: wrapper asks spanpoint whether it traces the call).
PATCHES = PatchSet("calls.official", _targets)

_WATCHING = threading.Event()


def _apply(_module: Any) -> None:
    PATCHES.apply()


def watch() -> None:
    """Step aside for the official instrumentation once it is imported (idempotent)."""
    if _WATCHING.is_set():
        return
    _WATCHING.set()
    register_post_import_hook(_apply, HANDLER_MODULE)
