"""What one graph call produced: ``RunResult``, its interrupts, and how both are stored.

A ``RunResult`` is built right after ``graph.invoke`` returns, from the output and (when the
graph has a checkpointer) one ``get_state`` call. It is the boundary's output: it is encoded
to plain data for the store and decoded back on replay, so a replayed result equals the
original one (``replayed`` aside, which is not part of equality).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import BaseMessage
from langgraph.types import Command, GraphOutput, Interrupt, StateSnapshot

from spanpoint import semconv
from spanpoint.errors import NotInterruptedError
from spanpoint.graph.types import RunRequest
from spanpoint.guard.state import TERMINATED_KEY

RunStatus = Literal["completed", "interrupted", "stopped", "failed"]

#: Version of the encoded form; a different version is not decoded (the call executes).
ENCODING_VERSION = 1


@dataclass(frozen=True, slots=True)
class InterruptInfo:
    """One pending LangGraph interrupt, in a form that survives the store.

    Attributes:
        index: position among the result's interrupts (what ``interrupt_index`` refers to).
        id: LangGraph's interrupt id; ``Command(resume={id: value})`` answers this one.
        value: the interrupt's value as JSON-safe data.
        node: the node that raised it, when known (the innermost node for subgraphs).
        task_id: the LangGraph task that raised it, when known.
        namespace: the checkpoint namespace of the (sub)graph it came from; ``""`` is the
            root graph, ``"child:<task id>"`` a subgraph node.
    """

    index: int
    id: str
    value: Any
    node: str | None = None
    task_id: str | None = None
    namespace: str = ""


@dataclass(frozen=True, slots=True)
class RunResult:
    """The typed result of one graph call.

    Attributes:
        status: ``completed``, ``interrupted`` (waiting for a resume), ``stopped`` (the
            guard ended the run: ``guard_terminated`` in the output; resume it with
            ``spanpoint.guard``'s explicit resume), or ``failed`` (only in run summaries: a
            failed call re-raises the graph's exception).
        output: what the graph returned, unchanged (including ``__interrupt__``).
        thread_id: the LangGraph thread of the call.
        latest_checkpoint_id / checkpoint_ns: LangGraph's latest checkpoint after the call
            (None without a checkpointer).
        next_nodes: the nodes that run when the thread is resumed.
        interrupts: the pending interrupts, root and subgraph ones.
        pending_state: what a resume needs: thread, namespace, checkpoint id, next nodes and
            interrupt ids (no state values).
        usage: tokens summed from the output messages' usage metadata.
        warnings: durability and capture warnings about this call.
        replayed: True when the result came from the store instead of executing.
        trace_id / span_id: the span of the call that produced the result (the original
            execution for a replayed result).
    """

    status: RunStatus
    output: Any
    thread_id: str
    latest_checkpoint_id: str | None = None
    checkpoint_ns: str | None = None
    next_nodes: tuple[str, ...] = ()
    interrupts: tuple[InterruptInfo, ...] = ()
    pending_state: Mapping[str, Any] = field(default_factory=dict)
    usage: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    replayed: bool = field(default=False, compare=False)
    trace_id: str | None = None
    span_id: str | None = None

    @property
    def interrupted(self) -> bool:
        """Whether the thread waits for a resume."""
        return self.status == "interrupted"

    def resume_request(self, value: Any, *, interrupt_index: int | None = None) -> RunRequest:
        """The request that answers this result's interrupt(s) with ``value`` on its thread.

        With one interrupt and no index the value is passed as ``Command(resume=value)``. With
        several interrupts, or an ``interrupt_index``, it is keyed by interrupt id
        (``Command(resume={id: value})``); with several and no index, ``value`` must already
        be a mapping from interrupt ids to values. A static breakpoint (``interrupt_before``
        / ``interrupt_after``) takes no value: pass None.
        """
        if not self.interrupted:
            raise NotInterruptedError(
                f"the graph call on thread {self.thread_id!r} is {self.status}, not "
                "interrupted; there is nothing to resume (check result.status before resuming)"
            )
        interrupts = self.interrupts
        if not interrupts:  # a static breakpoint: continue with no input
            if value is not None:
                raise NotInterruptedError(
                    f"thread {self.thread_id!r} stopped at a breakpoint before "
                    f"{list(self.next_nodes)}, which takes no resume value; pass None"
                )
            return RunRequest(None, self.thread_id)
        if interrupt_index is not None:
            chosen = pick_interrupt(interrupts, interrupt_index)
            return RunRequest.resume(Command(resume={chosen.id: value}), thread_id=self.thread_id)
        if len(interrupts) == 1:
            return RunRequest.resume(Command(resume=value), thread_id=self.thread_id)
        ids = {i.id for i in interrupts}
        if not isinstance(value, Mapping) or not set(value) <= ids or not value:
            raise NotInterruptedError(
                f"thread {self.thread_id!r} has {len(interrupts)} interrupts "
                f"({', '.join(sorted(ids))}); pass interrupt_index=N to answer one, or a dict "
                "{interrupt_id: value}"
            )
        return RunRequest.resume(Command(resume=dict(value)), thread_id=self.thread_id)

    def __repr__(self) -> str:
        return (
            f"RunResult(status={self.status!r}, thread_id={self.thread_id!r}, "
            f"interrupts={len(self.interrupts)}, next_nodes={self.next_nodes!r}, "
            f"replayed={self.replayed})"
        )


def pick_interrupt(interrupts: tuple[InterruptInfo, ...], index: int) -> InterruptInfo:
    """``interrupts[index]``; :class:`NotInterruptedError` naming the valid range otherwise."""
    if not isinstance(index, int) or not 0 <= index < len(interrupts):
        raise NotInterruptedError(
            f"interrupt_index {index!r} is out of range: the result has {len(interrupts)} "
            f"interrupt(s), indexes 0..{len(interrupts) - 1}"
        )
    return interrupts[index]


# --- building a result ----------------------------------------------------------------------


def guard_stopped(output: Any) -> bool:
    """Whether the guard stopped the call: its state says ``guard_terminated``.

    A stopped run did not complete its task, and a viewer must not count it as done: it has
    its own status in the result, the summary, the metrics, the run span and
    ``spanpoint show``.
    """
    values = output.value if isinstance(output, GraphOutput) else output
    return isinstance(values, Mapping) and values.get(TERMINATED_KEY) is True


def note_run_status(scope: Any, status: str) -> None:
    """Tell the run (a ``RunScope``) how its latest graph call ended: a guard stop makes it
    ``stopped``; a later call that goes on (an explicit resume) makes it running again."""
    if status == "stopped":
        scope.status = "stopped"
    elif scope.status == "stopped":
        scope.status = "running"


#: The form of a LangGraph interrupt id (an xxh3-128 hex digest).
_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")


def resume_map(resume: Any) -> dict[str, Any] | None:
    """A resume value keyed by interrupt id (``Command(resume={id: value})``), else None.

    LangGraph's own rule: a dict whose every key has the form of an interrupt id. Any other
    value, a dict such as ``{"decisions": [...]}`` too, answers the one pending interrupt.
    """
    if isinstance(resume, dict) and all(
        isinstance(k, str) and _INTERRUPT_ID.fullmatch(k) for k in resume
    ):
        return resume
    return None


def output_interrupts(output: Any) -> list[Interrupt]:
    """The interrupts a graph returned: ``__interrupt__`` (v1) or ``.interrupts`` (v2)."""
    if isinstance(output, Mapping):
        found = output.get("__interrupt__")
    else:
        found = getattr(output, "interrupts", None)
    return [i for i in found or () if isinstance(i, Interrupt)]


def snapshot_interrupts(snapshot: StateSnapshot) -> list[InterruptInfo]:
    """Interrupts of a snapshot's tasks, recursing into subgraph snapshots.

    A subgraph's interrupt is also listed on its parent task; the innermost report wins, so
    the interrupt keeps the subgraph's namespace and node.
    """
    found: dict[str, InterruptInfo] = {}
    ns = str(snapshot.config.get("configurable", {}).get("checkpoint_ns", ""))
    for task in snapshot.tasks:
        for intr in task.interrupts:
            found.setdefault(
                intr.id, InterruptInfo(0, intr.id, json_safe(intr.value), task.name, task.id, ns)
            )
        if isinstance(task.state, StateSnapshot):
            for info in snapshot_interrupts(task.state):
                found[info.id] = info
    return list(found.values())


def build_result(
    output: Any,
    thread_id: str,
    snapshot: StateSnapshot | None,
    *,
    warnings: Iterable[str] = (),
    span_ids: tuple[str, str] | None = None,
    checkpoint_config: Mapping[str, Any] | None = None,
) -> RunResult:
    """Assemble the :class:`RunResult` of a call from its output and latest snapshot.

    A call known to have completed needs no snapshot: ``checkpoint_config`` (the latest
    checkpoint's config, from the checkpointer) gives its checkpoint id and namespace.
    """
    by_id: dict[str, InterruptInfo] = {
        i.id: InterruptInfo(0, i.id, json_safe(i.value)) for i in output_interrupts(output)
    }
    checkpoint_id = checkpoint_ns = None
    next_nodes: tuple[str, ...] = ()
    if snapshot is not None:
        configurable = snapshot.config.get("configurable", {})
        checkpoint_id = configurable.get("checkpoint_id")
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        next_nodes = tuple(snapshot.next)
        for info in snapshot_interrupts(snapshot):
            by_id[info.id] = info
    elif checkpoint_config is not None:
        configurable = checkpoint_config.get("configurable", {})
        checkpoint_id = configurable.get("checkpoint_id")
        checkpoint_ns = configurable.get("checkpoint_ns", "")
    interrupts = tuple(dataclasses.replace(info, index=n) for n, info in enumerate(by_id.values()))
    status: RunStatus = "interrupted" if interrupts or next_nodes else "completed"
    if status == "completed" and guard_stopped(output):
        status = "stopped"
    pending: dict[str, Any] = {}
    if status == "interrupted":
        pending = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns or "",
            "checkpoint_id": checkpoint_id,
            "next_nodes": list(next_nodes),
            "interrupt_ids": [i.id for i in interrupts],
        }
    return RunResult(
        status=status,
        output=output,
        thread_id=thread_id,
        latest_checkpoint_id=checkpoint_id,
        checkpoint_ns=checkpoint_ns,
        next_nodes=next_nodes,
        interrupts=interrupts,
        pending_state=pending,
        usage=usage_of(output),
        warnings=tuple(warnings),
        trace_id=span_ids[0] if span_ids else None,
        span_id=span_ids[1] if span_ids else None,
    )


def latest_state(
    graph: Any, state_config: Any, output: Any, ended: bool
) -> tuple[StateSnapshot | None, Mapping[str, Any] | None]:
    """The thread's state after a call: ``(snapshot, None)``, or ``(None, checkpoint config)``
    when the call is known to have ``ended`` (no pending nodes, no interrupts): then only
    the latest checkpoint's id and namespace are needed, and one checkpointer read gives
    them for about half the cost of building the ``get_state`` snapshot."""
    if ended:
        latest = graph.checkpointer.get_tuple(state_config)
        if latest is not None:
            return None, latest.config
    subgraphs = bool(output_interrupts(output))  # subgraph interrupts keep their namespace
    return graph.get_state(state_config, subgraphs=subgraphs), None


async def alatest_state(
    graph: Any, state_config: Any, output: Any, ended: bool
) -> tuple[StateSnapshot | None, Mapping[str, Any] | None]:
    """The async form of :func:`latest_state`."""
    if ended:
        latest = await graph.checkpointer.aget_tuple(state_config)
        if latest is not None:
            return None, latest.config
    subgraphs = bool(output_interrupts(output))
    return await graph.aget_state(state_config, subgraphs=subgraphs), None


def output_messages(output: Any) -> list[Any]:
    """The ``messages`` of a graph output (a v1 state dict or a v2 ``GraphOutput``)."""
    values = output.value if isinstance(output, GraphOutput) else output
    messages = values.get("messages") if isinstance(values, Mapping) else None
    return list(messages) if isinstance(messages, list | tuple) else []


def output_counters(result: RunResult | None) -> dict[str, int]:
    """Message counts of the thread after the call (model turns, tool results)."""
    if result is None:
        return {}
    messages = output_messages(result.output)
    counters = {"interrupts": len(result.interrupts)}
    if messages:
        types = [getattr(m, "type", "") for m in messages]
        counters.update(
            messages=len(types),
            ai_messages=types.count("ai"),
            tool_messages=types.count("tool"),
        )
    return counters


def usage_of(output: Any) -> dict[str, int]:
    """Input/output/total tokens summed over the output's messages' ``usage_metadata``."""
    messages = output_messages(output)
    totals: dict[str, int] = {}
    for message in messages or ():
        usage = getattr(message, "usage_metadata", None)
        if not usage:
            continue
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    return totals


def json_safe(value: Any) -> Any:
    """``value`` as JSON data (not redacted: interrupt values are for the person answering)."""
    try:
        return json.loads(json.dumps(value, default=_json_default))
    except (TypeError, ValueError):  # cycles, unencodable keys
        return repr(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return {"type": value.type, "content": value.content}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


# --- span attributes ------------------------------------------------------------------------


def result_attributes(result: RunResult) -> dict[str, Any]:
    """The span attributes that describe a result (executed and replayed spans alike)."""
    attrs: dict[str, Any] = {
        semconv.STATUS: result.status,
        semconv.LANGGRAPH_INTERRUPT_COUNT: len(result.interrupts),
    }
    if result.latest_checkpoint_id:
        attrs[semconv.GEN_AI_AGENT_CHECKPOINT_ID] = result.latest_checkpoint_id
    if result.checkpoint_ns is not None:
        attrs[semconv.LANGGRAPH_CHECKPOINT_NS] = result.checkpoint_ns
    if result.interrupts:
        attrs[semconv.LANGGRAPH_INTERRUPT_IDS] = [i.id for i in result.interrupts]
    if result.next_nodes:
        attrs[semconv.LANGGRAPH_NEXT_NODES] = list(result.next_nodes)
    if "input_tokens" in result.usage:
        attrs[semconv.GEN_AI_USAGE_INPUT_TOKENS] = result.usage["input_tokens"]
    if "output_tokens" in result.usage:
        attrs[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = result.usage["output_tokens"]
    if result.warnings:
        attrs[semconv.WARNINGS] = list(result.warnings)
    return attrs


# --- store encoding -------------------------------------------------------------------------


def encode_result(result: RunResult) -> dict[str, Any]:
    """Plain data for the store (the output stays as is: LangGraph's serializer handles it)."""
    return {  # every field but ``replayed`` (tests/graph/test_graph_runner.py checks the list)
        "status": result.status,
        "output": _encode_output(result.output),
        "thread_id": result.thread_id,
        "latest_checkpoint_id": result.latest_checkpoint_id,
        "checkpoint_ns": result.checkpoint_ns,
        "next_nodes": list(result.next_nodes),
        "interrupts": [dataclasses.asdict(i) for i in result.interrupts],
        "pending_state": dict(result.pending_state),
        "usage": dict(result.usage),
        "warnings": list(result.warnings),
        "trace_id": result.trace_id,
        "span_id": result.span_id,
        "v": ENCODING_VERSION,
    }


def decode_result(data: Any) -> RunResult:
    """The :class:`RunResult` that :func:`encode_result` stored, marked ``replayed``."""
    if not isinstance(data, Mapping) or data.get("v") != ENCODING_VERSION:
        raise ValueError("not a spanpoint RunResult checkpoint of this version")
    fields = dict(data)
    fields.pop("v")
    fields["interrupts"] = tuple(InterruptInfo(**i) for i in fields["interrupts"])
    fields["next_nodes"] = tuple(fields["next_nodes"])
    fields["warnings"] = tuple(fields["warnings"])
    fields["output"] = _decode_output(fields["output"])
    return RunResult(replayed=True, **fields)


_GRAPH_OUTPUT = "__spanpoint_graph_output__"


def _encode_output(output: Any) -> Any:
    # invoke(version="v2") returns a GraphOutput, which LangGraph's serializer does not
    # round-trip (its interrupts tuple comes back a list): store its parts instead.
    if isinstance(output, GraphOutput):
        return {_GRAPH_OUTPUT: True, "value": output.value, "interrupts": list(output.interrupts)}
    return output


def _decode_output(output: Any) -> Any:
    if isinstance(output, Mapping) and output.get(_GRAPH_OUTPUT) is True:
        return GraphOutput(value=output["value"], interrupts=tuple(output["interrupts"]))
    return output
