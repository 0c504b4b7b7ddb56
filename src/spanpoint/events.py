"""Span events: records of what happened inside a boundary, never boundaries themselves.

Stream chunks and LangChain callbacks (``SpanEventCallbackHandler``) become *bounded* span
events on the span that is current when they arrive. They are never committed and can never
satisfy a replay: nothing here touches a checkpoint store (design invariant 4).

Bounded means: at most ``max_events`` events per span from spanpoint (the rest are counted
in ``spanpoint.events.dropped``), attribute values cut by the capture policy (bytes, items),
and content — message text, state values — only when the policy opts in.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from spanpoint import semconv
from spanpoint.capture import CapturePolicy, default_policy, truncate

#: Events spanpoint adds to one span before it only counts them.
MAX_EVENTS_PER_SPAN = 64

_COUNTS: weakref.WeakKeyDictionary[trace.Span, int] = weakref.WeakKeyDictionary()
_COUNTS_LOCK = threading.Lock()


def _policy(policy: CapturePolicy | None) -> CapturePolicy:
    return policy if policy is not None else default_policy()


def bound_attributes(
    attributes: Mapping[str, Any], policy: CapturePolicy | None = None
) -> dict[str, AttributeValue]:
    """OTel-valid, bounded attribute values: primitives kept, strings cut, the rest as JSON.

    ``None`` values are dropped; sequences of primitives keep at most ``max_items`` items (as
    strings when their types are mixed); anything else goes through ``policy.to_json``, which
    redacts secret keys.
    """
    pol = _policy(policy)
    out: dict[str, AttributeValue] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float):
            out[key] = value
        elif isinstance(value, str):
            out[key] = truncate(value, pol.max_bytes)
        elif isinstance(value, Sequence) and _primitive_items(value):
            items = list(value)[: pol.max_items]
            if len({type(v) for v in items}) > 1 or any(isinstance(v, str) for v in items):
                out[key] = [truncate(str(v), pol.max_bytes) for v in items]
            else:
                out[key] = items
        else:
            out[key] = pol.to_json(value)
    return out


def _primitive_items(value: Sequence[Any]) -> bool:
    return all(isinstance(v, str | bool | int | float) for v in value)


def add_bounded_event(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    span: trace.Span | None = None,
    policy: CapturePolicy | None = None,
    max_events: int = MAX_EVENTS_PER_SPAN,
) -> bool:
    """Add event ``name`` to ``span`` (default: the current span) within the per-span budget.

    Returns whether the event was added. Over budget, the event is only counted in the span's
    ``spanpoint.events.dropped`` attribute. Never raises: events are best effort.
    """
    target = span if span is not None else trace.get_current_span()
    if not target.is_recording():
        return False
    try:
        with _COUNTS_LOCK:
            count = _COUNTS.get(target, 0) + 1
            _COUNTS[target] = count
        if count > max_events:
            target.set_attribute(semconv.EVENTS_DROPPED, count - max_events)
            return False
        target.add_event(name, bound_attributes(attributes or {}, policy))
    except Exception:  # an event must never break the call it observes
        return False
    return True


class StreamRecorder:
    """Turns LangGraph stream chunks into ``spanpoint.stream.chunk`` events on one span.

    Understands every chunk shape ``stream``/``astream`` yields: a bare payload (one mode),
    ``(mode, payload)`` (several modes), ``(namespace, …)`` (``subgraphs=True``) and the v2
    ``{"type", "ns", "data"}`` parts. The chunk itself is yielded to the caller untouched.
    """

    __slots__ = (
        "_first_chunk_at",
        "_multi",
        "_single",
        "_started",
        "_subgraphs",
        "count",
        "interrupts",
        "policy",
        "span",
    )

    def __init__(
        self,
        span: trace.Span,
        *,
        stream_mode: str | Sequence[str] | None = None,
        subgraphs: bool = False,
        policy: CapturePolicy | None = None,
    ) -> None:
        self.span = span
        self.policy = _policy(policy)
        self.count = 0
        #: LangGraph ``Interrupt`` objects seen in the chunks (``__interrupt__`` updates).
        self.interrupts: list[Any] = []
        self._multi = stream_mode is not None and not isinstance(stream_mode, str)
        self._single = stream_mode if isinstance(stream_mode, str) else None
        self._subgraphs = subgraphs
        self._started = time.monotonic()
        self._first_chunk_at: float | None = None
        if span.is_recording() and stream_mode is not None:
            modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
            span.set_attribute(semconv.LANGGRAPH_STREAM_MODE, modes)

    def record(self, chunk: Any) -> None:
        """Record one chunk as a bounded event (never raises)."""
        self.count += 1
        if self._first_chunk_at is None:
            self._first_chunk_at = time.monotonic()
        try:
            namespace, mode, payload = self._split(chunk)
            self._collect_interrupts(chunk, payload)
            if not self.span.is_recording():
                return
            attrs = self._describe(mode, payload)
        except Exception:  # an unexpected chunk shape is still counted
            namespace, attrs = (), {}
        attrs[semconv.STREAM_INDEX] = self.count - 1
        if namespace:
            attrs[semconv.LANGGRAPH_CHECKPOINT_NS] = "|".join(namespace)
        add_bounded_event(semconv.EVENT_STREAM_CHUNK, attrs, span=self.span, policy=self.policy)

    def finish(self) -> None:
        """Put the stream's totals on the span: chunk count and time to the first chunk."""
        if not self.span.is_recording():
            return
        self.span.set_attribute(semconv.STREAM_CHUNKS, self.count)
        if self._first_chunk_at is not None:
            self.span.set_attribute(
                semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, self._first_chunk_at - self._started
            )

    def _collect_interrupts(self, chunk: Any, payload: Any) -> None:
        found = payload.get("__interrupt__") if isinstance(payload, Mapping) else None
        if not found and isinstance(chunk, dict) and "type" in chunk:
            found = chunk.get("interrupts")  # v2 values parts carry them beside the data
        for item in found or ():
            if all(getattr(i, "id", None) != getattr(item, "id", None) for i in self.interrupts):
                self.interrupts.append(item)

    def _split(self, chunk: Any) -> tuple[tuple[str, ...], str | None, Any]:
        if isinstance(chunk, dict) and "type" in chunk and "data" in chunk and "ns" in chunk:
            return tuple(chunk["ns"] or ()), str(chunk["type"]), chunk["data"]
        namespace: tuple[str, ...] = ()
        if self._subgraphs and isinstance(chunk, tuple) and len(chunk) >= 2:
            namespace, chunk = tuple(chunk[0]), chunk[1:] if len(chunk) > 2 else chunk[1]
        if self._multi and isinstance(chunk, tuple) and len(chunk) == 2:
            return namespace, str(chunk[0]), chunk[1]
        return namespace, self._single, chunk

    def _describe(self, mode: str | None, payload: Any) -> dict[str, Any]:
        attrs: dict[str, Any] = {semconv.LANGGRAPH_STREAM_MODE: mode}
        policy = self.policy
        if mode == "messages" and isinstance(payload, tuple) and len(payload) == 2:
            message, metadata = payload
            if isinstance(metadata, Mapping):
                attrs[semconv.LANGGRAPH_NODE] = metadata.get("langgraph_node")
            if policy.content_on_events:
                attrs[semconv.STREAM_CONTENT] = policy.to_json(message)
            return attrs
        if mode == "tasks" and isinstance(payload, Mapping):
            attrs[semconv.LANGGRAPH_NODE] = payload.get("name")
            attrs[semconv.LANGGRAPH_TASK_ID] = payload.get("id")
        elif isinstance(payload, Mapping):
            keys = [str(k) for k in payload]
            attrs[semconv.STREAM_KEYS] = keys
            if mode == "updates":
                attrs[semconv.LANGGRAPH_NODE] = [k for k in keys if not k.startswith("__")]
        if policy.capture_state:
            attrs[semconv.STREAM_CONTENT] = policy.to_json(payload)
        return attrs


# --- LangChain callbacks -------------------------------------------------------------------


class SpanEventCallbackHandler(BaseCallbackHandler):
    """Records LangChain callbacks as bounded ``spanpoint.callback`` events on the current span.

    LLM start/end/error, the first streamed token (time to first token, also set on the span
    as ``gen_ai.response.time_to_first_chunk``), tool start/end/error, retriever and chain
    events. Like every event it never commits or replays anything: a run observed only by
    callbacks has no checkpoints, and a replay never consults them.

    >>> agent.invoke(inputs, config={"callbacks": [SpanEventCallbackHandler()]})  # doctest: +SKIP

    Args:
        policy: the capture policy (default: ``configure``'s); tool inputs and outputs are
            only recorded, redacted, when it captures content on events.
        chains: also record chain start/end (every LangGraph node and runnable: noisy).
    """

    run_inline = True  # in the caller's context, so the current span is the right one

    def __init__(self, policy: CapturePolicy | None = None, *, chains: bool = False) -> None:
        self.policy = policy
        self.chains = chains
        self._llm_runs: dict[UUID, list[float]] = {}  # run -> [started, first token, tokens]
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SpanEventCallbackHandler(chains={self.chains})"

    @property
    def ignore_chain(self) -> bool:
        """LangChain skips chain callbacks unless ``chains=True`` (they are very frequent)."""
        return not self.chains

    def _event(self, kind: str, run_id: UUID, **attrs: Any) -> None:
        attrs[semconv.CALLBACK_TYPE] = kind
        attrs[semconv.CALLBACK_RUN_ID] = str(run_id)
        add_bounded_event(semconv.EVENT_CALLBACK, attrs, policy=self.policy)

    def _content(self, value: Any) -> str | None:
        policy = _policy(self.policy)
        return policy.to_json(value) if policy.content_on_events else None

    # --- model calls ---------------------------------------------------------------------

    def on_chat_model_start(
        self, serialized: Any, messages: list[list[Any]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        """A chat model call started."""
        self._llm_started(run_id, kwargs, sum(len(batch) for batch in messages))

    def on_llm_start(
        self, serialized: Any, prompts: list[str], *, run_id: UUID, **kwargs: Any
    ) -> None:
        """A completion model call started."""
        self._llm_started(run_id, kwargs, len(prompts))

    def _llm_started(self, run_id: UUID, kwargs: Mapping[str, Any], messages: int) -> None:
        with self._lock:
            if len(self._llm_runs) > 1024:  # runs whose end never came: do not grow forever
                self._llm_runs.clear()
            self._llm_runs[run_id] = [time.monotonic(), 0.0, 0.0]
        metadata = kwargs.get("metadata") or {}
        self._event(
            "llm_start",
            run_id,
            **{
                semconv.CALLBACK_NAME: metadata.get("ls_model_name"),
                semconv.GEN_AI_PROVIDER_NAME: metadata.get("ls_provider"),
                "spanpoint.callback.messages": messages,
            },
        )

    def on_llm_new_token(self, token: str, *, run_id: UUID, **kwargs: Any) -> None:
        """A streamed token: the first one records the time to first token."""
        with self._lock:
            state = self._llm_runs.get(run_id)
            if state is None:
                return
            state[2] += 1
            first = state[1] == 0.0
            if first:
                state[1] = time.monotonic() - state[0]
        if first:
            span = trace.get_current_span()
            if span.is_recording():
                span.set_attribute(semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, state[1])
            self._event(
                "llm_first_token", run_id, **{semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: state[1]}
            )

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A model call ended: usage, finish reason, streamed token count."""
        with self._lock:
            state = self._llm_runs.pop(run_id, None)
        attrs: dict[str, Any] = {}
        if state is not None and state[2]:
            attrs[semconv.CALLBACK_TOKENS] = int(state[2])
            attrs[semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = state[1]
        message = _first_message(response)
        usage = getattr(message, "usage_metadata", None) or {}
        attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = usage.get("input_tokens")
        attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = usage.get("output_tokens")
        meta = getattr(message, "response_metadata", None) or {}
        reason = meta.get("finish_reason") or meta.get("stop_reason")
        attrs[semconv.GEN_AI_RESPONSE_FINISH_REASONS] = [str(reason)] if reason else None
        self._event("llm_end", run_id, **attrs)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A model call failed."""
        with self._lock:
            self._llm_runs.pop(run_id, None)
        self._event("llm_error", run_id, **{semconv.ERROR_TYPE: type(error).__qualname__})

    # --- tools, retrievers, chains -------------------------------------------------------

    def on_tool_start(
        self, serialized: Any, input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        """A tool started (its input only when content capture is on, redacted)."""
        name = (serialized or {}).get("name") or (kwargs.get("metadata") or {}).get("name")
        inputs = kwargs.get("inputs")
        content = self._content(inputs if inputs is not None else input_str)
        self._event(
            "tool_start",
            run_id,
            **{semconv.CALLBACK_NAME: name, semconv.CALLBACK_CONTENT: content},
        )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool returned (its output only when content capture is on, redacted)."""
        content = getattr(output, "content", output)
        self._event("tool_end", run_id, **{semconv.CALLBACK_CONTENT: self._content(content)})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool raised."""
        self._event("tool_error", run_id, **{semconv.ERROR_TYPE: type(error).__qualname__})

    def on_retriever_start(
        self, serialized: Any, query: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        """A retriever started."""
        name = (serialized or {}).get("name") or (kwargs.get("metadata") or {}).get("name")
        self._event(
            "retriever_start",
            run_id,
            **{semconv.CALLBACK_NAME: name, semconv.CALLBACK_CONTENT: self._content(query)},
        )

    def on_retriever_end(self, documents: Sequence[Any], *, run_id: UUID, **kwargs: Any) -> None:
        """A retriever returned documents (counted)."""
        self._event("retriever_end", run_id, **{semconv.CALLBACK_DOCUMENTS: len(documents)})

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A retriever raised."""
        self._event("retriever_error", run_id, **{semconv.ERROR_TYPE: type(error).__qualname__})

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A chain (graph node, runnable) started; recorded only with ``chains=True``."""
        name = kwargs.get("name") or (serialized or {}).get("name")
        self._event("chain_start", run_id, **{semconv.CALLBACK_NAME: name})

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A chain ended; recorded only with ``chains=True``."""
        self._event("chain_end", run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A chain raised; recorded only with ``chains=True``."""
        self._event("chain_error", run_id, **{semconv.ERROR_TYPE: type(error).__qualname__})


def _first_message(response: Any) -> Any:
    try:
        return response.generations[0][0].message
    except (AttributeError, IndexError, TypeError):
        return None
