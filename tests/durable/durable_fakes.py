"""Offline doubles for the durable-calls acceptance tests (issue 15).

Every fake chat model here answers *from the conversation it is given*, never from a counter
(DESIGN.md, testing notes): replay skips calls, so a counter-driven script would diverge after
a replay and prove nothing.

- ``DraftModel`` writes a draft derived from the last human message plus ``os.urandom`` bytes.
  A second real execution therefore writes a *different* draft: when the text a node sends
  equals the text it showed in ``interrupt()``, the model call was replayed, not repeated.
- ``ScriptModel`` drives a real upstream agent (Deep Agents, a supervisor, a swarm): a
  ``decide`` function picks the next tool calls from which ``ToolMessage``s are present.
  Tool-call ids are fresh ``uuid4``s on every real execution, as a real provider's are.

Both are ``fakes.ScriptedModel`` subclasses (the suite's one family of fake models) adding
only the execution log, the kill points and tool binding in the OpenAI format.

Every real execution of a model or a tool is appended to a JSON-lines log under an exclusive
``fcntl`` lock, so the work of a process that is SIGKILLed right afterwards is still counted.
``kill_point(label)`` SIGKILLs the current process when ``$DURABLE_KILL_AT`` names ``label``:
a real ``SIGKILL``, no handler, no flush, no span end.

Only public LangChain / LangGraph API is used here, and nothing of spanpoint.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable

from fakes import ScriptedModel

KILL_ENV = "DURABLE_KILL_AT"
LOG_ENV = "DURABLE_LOG"


# --- the execution log -------------------------------------------------------------------


def log_path(default: str | os.PathLike[str] | None = None) -> Path:
    """Where executions are logged: ``$DURABLE_LOG`` (set per attempt), else ``default``."""
    path = os.environ.get(LOG_ENV) or default
    if not path:
        raise RuntimeError(f"set ${LOG_ENV} or pass a log path")
    return Path(path)


def record(path: str | os.PathLike[str], kind: str, label: str, **extra: Any) -> None:
    """Append one execution to the log, under an exclusive lock, flushed before returning."""
    line = json.dumps({"kind": kind, "label": label, "pid": os.getpid(), **extra})
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every execution logged so far, oldest first."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def labels(path: str | os.PathLike[str], kind: str | None = None) -> Counter[str]:
    """How many times each label was executed (of one kind, when given)."""
    return Counter(e["label"] for e in read_log(path) if kind is None or e["kind"] == kind)


def kill_point(label: str) -> None:
    """SIGKILL this process when ``$DURABLE_KILL_AT`` is ``label``."""
    if os.environ.get(KILL_ENV) == label:
        os.kill(os.getpid(), signal.SIGKILL)


# --- models ------------------------------------------------------------------------------


def _last_human(messages: Sequence[BaseMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return str(message.content)
    return ""


class _LoggingModel(ScriptedModel):
    """Shared parts: tool binding like a real model, and the execution log. Its ``answer`` is
    the reply rule; ``script`` is unused."""

    log: str = ""
    model_name: str = "fake-durable"

    @property
    def _llm_type(self) -> str:
        return "durable-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, BaseMessage]:
        """Accept tools like a real model does (the script decides which are called)."""
        names = []
        for t in tools:
            name = getattr(t, "name", None) or (t.get("name") if isinstance(t, dict) else None)
            names.append(str(name or t))
        kwargs.pop("parallel_tool_calls", None)
        # The OpenAI tool format: what prebuilt agents look for in an already-bound model.
        schemas = [{"type": "function", "function": {"name": n}} for n in sorted(names)]
        return self.bind(tools=schemas, **kwargs)


class DraftModel(_LoggingModel):
    """Drafts a reply to the last human message; every real execution adds random bytes."""

    def answer(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """A draft of the reply to the last human message, with this execution's bytes."""
        request = _last_human(messages)
        draft = f"Draft reply to {request!r} [{os.urandom(6).hex()}]"
        record(log_path(self.log or None), "model", f"draft:{request}", text=draft)
        kill_point(f"model:draft:{request}")
        usage = {"input_tokens": 12, "output_tokens": 9, "total_tokens": 21}
        return AIMessage(content=draft, usage_metadata=usage)


#: decide(messages) -> (label, reply). The label names the decision, so the log tells which
#: model calls ran in which attempt.
Decide = Callable[[Sequence[BaseMessage]], tuple[str, AIMessage]]


class ScriptModel(_LoggingModel):
    """Drives an agent from the conversation: ``decide`` picks the reply.

    Kill points: ``before:<label>`` (nothing of the call ran) and ``after:<label>`` (the call
    ran and was logged, its reply was not returned).
    """

    role: str = "agent"
    decide: Any = None  # Decide; Any because pydantic cannot validate a Callable type alias

    def answer(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """The reply ``decide`` picks, logged between its two kill points."""
        label, reply = self.decide(messages)
        label = f"{self.role}:{label}"
        kill_point(f"before:{label}")
        record(log_path(self.log or None), "model", label)
        kill_point(f"after:{label}")
        return reply


def tool_call(name: str, **args: Any) -> dict[str, Any]:
    """A tool call with a fresh random id, as a real provider mints one."""
    return {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:16]}", "type": "tool_call"}


def tool_results(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """The content of the latest ``ToolMessage`` of each tool name in ``messages``."""
    done: dict[str, str] = {}
    for message in messages:
        if isinstance(message, ToolMessage) and message.name:
            done[message.name] = str(message.content)
    return done


def first_human(messages: Sequence[BaseMessage]) -> str:
    """The text of the first human message (a sub-agent's is its task description)."""
    for message in messages:
        if isinstance(message, HumanMessage):
            return str(message.content)
    return ""


def conversation(messages: Sequence[Any]) -> list[list[Any]]:
    """Messages as comparable data: type, name, content and tool-call names; never ids."""
    rows: list[list[Any]] = []
    for m in messages:
        calls = [c["name"] for c in getattr(m, "tool_calls", None) or []]
        rows.append([m.type, getattr(m, "name", None), str(m.content), calls])
    return rows
