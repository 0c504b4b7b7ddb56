"""Forks: a recorded run again, with one call's output overridden or executed again.

>>> new_id = spanpoint.fork("ticket-42", at="lookup_ticket#2", output="ticket 8: closed")
>>> with spanpoint.run(new_id):                     # doctest: +SKIP
...     agent.invoke(request)                       # the same program, the same input

"What would the agent have done if the tool had returned X?" A fork answers it without
re-paying the run. ``fork`` writes a new run into the store: every checkpoint of the original
run under the key the new run id gives it, and the override as the output of the *cut* (the
boundary named by ``at``, the label ``spanpoint show`` prints: the path with ``#N`` for its
Nth call in the attempt ``spanpoint diff`` reads, the latest that did not fail). Then
the user runs the same program with the new run id, and spanpoint's ordinary replay does the
rest: every call before the cut replays; the cut returns the override; after it, a call
whose input is unchanged replays (its key is the original's, moved to the new run id), and a
call whose input changed (the model call that reads the overridden tool result) misses and
executes. Nothing is decided by position alone: a call is reused only when its content is.

A key moves to another run id because the run id enters a key once, at the end:
``serde.checkpoint_key(run id, identity, ordinal, fingerprint)``, and each checkpoint keeps
its identity path and fingerprint (``Checkpoint.identity``/``.fingerprint``). The boundaries
that *enclose* the cut are not copied: a committed graph call or step around it would replay
as a whole and never reach the override. Copied checkpoints keep their original span ids
(a replay in the fork links to the original execution) and attempt 0 (the fork's own
attempts count from 1, and its cost totals count what it executed itself).

A run on a LangGraph thread with a persistent checkpointer keys its calls by that thread's
task ids, which a fork cannot reuse (the original thread has already answered; the fork runs
on a new thread). Each checkpoint also keeps the identity its call has by position
(``run.Frame.portable``); a fork is keyed by that, and a fork run keys its tasks by position,
so the same program on a new thread finds the calls before the cut.

The new run also gets one record that is no boundary (kind ``fork``): the original run, the
cut, and the original run's span, which every attempt of the fork links to from its run span
(``spanpoint.run``; ``spanpoint.fork.*`` attributes). Everything is checked before the first
write: an unknown run or boundary, an output the cut cannot return, checkpoints recorded
before they kept their input identity, or a taken run id raise :class:`ForkError`.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spanpoint import semconv, serde
from spanpoint.config import settings
from spanpoint.errors import ForkError, NotReplayable, SerializationError, StoreError
from spanpoint.run import fork_origin_key, validate_run_id
from spanpoint.stores import CheckpointStore, open_store
from spanpoint.stores.base import BoundaryRecord, Checkpoint, capabilities

if TYPE_CHECKING:
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.types import Command

#: The kinds of boundary a fork can cut at (a graph call's result is the whole graph's).
CUT_KINDS = frozenset({semconv.KIND_MODEL_CALL, semconv.KIND_TOOL_CALL, semconv.KIND_STEP})
_AT = re.compile(r"(?P<path>.+?)(?:#(?P<n>\d+))?")
# The tool-call id an overriding ToolMessage answers: replay gives it the current call's id.
_CALL_ID = "spanpoint-fork"


class _Rerun:
    """No override: the cut executes again (``fork(..., at=...)`` without ``output``)."""

    def __repr__(self) -> str:
        return "RERUN"


#: ``output`` of a fork that executes the cut and everything after it again.
RERUN: Any = _Rerun()


def fork(
    run_id: str,
    *,
    at: str,
    output: Any = RERUN,
    new_run_id: str | None = None,
    store: CheckpointStore | str | None = None,
) -> str:
    """Fork the recorded run ``run_id`` at the boundary ``at`` with ``output``; return the new
    run's id. Run the same program under ``spanpoint.run(<that id>)`` to see what follows.

    Args:
        run_id: the recorded run.
        at: the cut: a path as ``spanpoint show`` prints it (``lookup_ticket``,
            ``triage/notify``), with ``#N`` for the Nth call of that path (1 for the first)
            in the attempt ``spanpoint diff`` compares (the latest that did not fail; a fork
            of a fork is cut as its own runs went).
        output: what the cut returns in the fork; omitted, the cut and every call that
            started after it execute again (DBOS's ``fork_workflow``), and only the calls
            before it replay. A tool call: its result text, the fields
            of a ``ToolMessage`` (``{"content": ...}``), a ``ToolMessage`` or a ``Command``.
            A model call: the reply's text, the fields of an ``AIMessage`` (``{"content":
            ..., "tool_calls": [{"name": ..., "args": {...}}]}``) or an ``AIMessage``. A
            step: any value its serializer takes.
        new_run_id: the new run's id (default ``<run_id>.fork-<8 hex digits>``).
        store: the store holding the run (default: ``configure``'s); a store address is
            opened and closed here.

    Raises:
        ForkError: nothing was written; the message says why and what to do.
    """
    st = open_store(store) if isinstance(store, str) else (store or settings().store)
    try:
        new_id = validate_run_id(new_run_id or f"{run_id}.fork-{uuid.uuid4().hex[:8]}")
        writes = plan(st, run_id, at, output, new_id)
        original = st.get_run(run_id)
        _write(st, new_id, original.name if original else None, writes)
    finally:
        if isinstance(store, str):
            st.close()
    return new_id


def plan(
    store: CheckpointStore, run_id: str, at: str, output: Any, new_run_id: str
) -> list[Checkpoint]:
    """The checkpoints a fork writes, its origin record last; :class:`ForkError` when it
    cannot fork as asked. Reads only."""
    if new_run_id == run_id:
        raise ForkError(f"a fork needs a new run id, not {run_id!r} itself; pass another one")
    if store.get_run(run_id) is None:
        raise ForkError(
            f"no run {run_id!r} in {store.description}; `spanpoint runs` lists the runs it holds"
        )
    if store.get_run(new_run_id) is not None or store.list_checkpoints(new_run_id):
        raise ForkError(
            f"run {new_run_id!r} already exists in {store.description}; fork under another id "
            "(new_run_id=..., or --as on the command line)"
        )
    checkpoints = sorted(
        (cp for cp in store.list_checkpoints(run_id) if cp.kind != semconv.KIND_FORK),
        key=lambda cp: (cp.started_at_ns, cp.ended_at_ns),
    )
    journal = store.list_journal(run_id)
    steps = attempt_steps(checkpoints, journal, chosen_attempt(checkpoints, journal))
    cut, label, position = _find_cut(run_id, steps, at)
    rerun = output is RERUN
    if rerun:  # only what started before the cut replays; the rest executes again
        before = {id(s.checkpoint) for s in steps[:position] if s.checkpoint is not None}
        checkpoints = [cp for cp in checkpoints if id(cp) in before]
    old = [cp for cp in checkpoints if cp.identity is None or cp.fingerprint is None]
    if old:
        raise ForkError(
            f"{len(old)} of the {len(checkpoints)} checkpoints of run {run_id!r} (the first: "
            f"{old[0].path!r}) were committed by a spanpoint that did not keep their input "
            "identity, so their keys cannot be moved to a new run id; record the run again "
            "with this spanpoint (under a new run id) and fork that run"
        )
    output_type, data = ("", b"") if rerun else _override(cut, label, output)
    enclosing, run_span_id = _enclosing(cut, checkpoints, journal)
    writes: list[Checkpoint] = []
    assert cut.identity is not None and cut.fingerprint is not None
    cut_key = serde.checkpoint_key(new_run_id, cut.identity, cut.ordinal, cut.fingerprint)
    for cp in checkpoints:
        if cp.key in enclosing:
            continue  # a committed parent would replay whole and never reach the override
        assert cp.identity is not None and cp.fingerprint is not None
        key = serde.checkpoint_key(new_run_id, cp.identity, cp.ordinal, cp.fingerprint)
        moved = dataclasses.replace(cp, key=key, run_id=new_run_id, attempt=0)
        if cp is cut:
            view = {**cp.view, "fork": {"run_id": run_id, "cut": label}}
            moved = dataclasses.replace(moved, output_type=output_type, output=data, view=view)
        writes.append(moved)
    origin = {
        "run_id": run_id,
        "cut": label,
        "cut_kind": cut.kind,
        "cut_key": cut_key,
        "original_cut_key": cut.key,
        "trace_id": cut.trace_id,
        "span_id": run_span_id,
        "copied": len(writes),
        "rerun": rerun,
    }
    origin_type, origin_data = serde.dumps(origin)
    now = time.time_ns()
    writes.append(
        Checkpoint(
            key=fork_origin_key(new_run_id),
            run_id=new_run_id,
            path=semconv.FORK_RECORD_PATH,
            name=semconv.FORK_RECORD_PATH,
            kind=semconv.KIND_FORK,
            ordinal=0,
            output_type=origin_type,
            output=origin_data,
            trace_id=cut.trace_id,
            span_id=run_span_id,
            attempt=0,
            started_at_ns=now,
            ended_at_ns=now,
            view=origin,
        )
    )
    return writes


# --- one attempt's boundaries, labelled as `spanpoint show` prints them ---------------------


@dataclass(frozen=True)
class Step:
    """One boundary as one attempt of a run went through it, labelled as it is printed."""

    label: str
    kind: str
    path: str
    status: str
    started_at_ns: int
    ended_at_ns: int
    span_id: str
    parent_span_id: str | None
    #: Its committed output (executed in this attempt, or the checkpoint it replayed); None
    #: for a boundary that failed or was interrupted.
    checkpoint: Checkpoint | None
    error: str | None = None


def chosen_attempt(checkpoints: Sequence[Checkpoint], journal: Sequence[BoundaryRecord]) -> int:
    """The attempt a run is shown by in ``diff`` and cut in by ``fork``: the latest attempt
    in which no boundary failed, else the latest; 0 for a fork no attempt has run yet."""
    attempts = {
        cp.attempt for cp in checkpoints if cp.attempt and cp.kind in semconv.BOUNDARY_KINDS
    }
    attempts |= {r.attempt for r in journal if r.attempt}
    if not attempts:
        return 0
    failed = {r.attempt for r in journal if r.status == "error"}
    completed = sorted(attempts - failed)
    return completed[-1] if completed else max(attempts)


def attempt_steps(
    checkpoints: Sequence[Checkpoint], journal: Sequence[BoundaryRecord], attempt: int
) -> list[Step]:
    """Every boundary ``attempt`` went through, in the order they started, labelled
    ``path#N`` (the Nth boundary of that path in this attempt): what ``spanpoint show``
    prints for the attempt, ``spanpoint diff`` pairs and ``spanpoint fork --at`` takes.

    Attempt 0 is a fork no attempt has run yet: its copies, in the original run's order.
    """
    by_key = {cp.key: cp for cp in checkpoints}
    found: list[tuple[int, int, Step]] = []
    for cp in checkpoints:
        if cp.attempt == attempt and cp.kind in semconv.BOUNDARY_KINDS:
            step = Step("", cp.kind, cp.path, "ok", cp.started_at_ns, cp.ended_at_ns,
                        cp.span_id, cp.parent_span_id, cp)  # fmt: skip
            found.append((cp.started_at_ns, len(found), step))
    for r in journal if attempt else ():
        if r.attempt == attempt and r.kind in semconv.BOUNDARY_KINDS:
            cp = by_key.get(r.key) if r.status == "replayed" else None
            step = Step("", r.kind, r.path, r.status, r.started_at_ns, r.ended_at_ns,
                        r.span_id, r.parent_span_id, cp, r.error)  # fmt: skip
            found.append((r.started_at_ns, len(found), step))
    seen: dict[str, int] = defaultdict(int)
    steps = []
    for _, _, step in sorted(found, key=lambda t: (t[0], t[1])):
        seen[step.path] += 1
        steps.append(dataclasses.replace(step, label=f"{step.path}#{seen[step.path]}"))
    return steps


def _find_cut(run_id: str, steps: Sequence[Step], at: str) -> tuple[Checkpoint, str, int]:
    """The checkpoint ``at`` names, its name with ``#N`` always spelled out, and its place
    among ``steps`` (the attempt's boundaries in start order, as ``spanpoint show`` prints
    them)."""
    match = _AT.fullmatch(at.strip()) if isinstance(at, str) else None
    if match is None:
        raise ForkError(f"--at must name a boundary such as 'lookup_ticket#2', not {at!r}")
    path, n = match["path"], match["n"]
    calls = [(i, s) for i, s in enumerate(steps) if s.path == path]
    if not calls:
        known = sorted({s.path for s in steps})
        shown = ", ".join(repr(p) for p in known[:20]) + (", …" if len(known) > 20 else "")
        raise ForkError(
            f"run {run_id!r} has no committed boundary {path!r}; it has {shown or 'none'} (the "
            f"paths `spanpoint show {run_id}` prints, with #N for the Nth call of one path)"
        )
    if n is None:
        if len(calls) > 1:
            raise ForkError(
                f"{path!r} was called {len(calls)} times in run {run_id!r}; say which: "
                f"{path}#1 … {path}#{len(calls)} (in the order they started)"
            )
        index = 1
    else:
        index = int(n)
        if not 1 <= index <= len(calls):
            raise ForkError(
                f"run {run_id!r} has {len(calls)} call(s) of {path!r}, so {at!r} names none; "
                f"use {path}#1 … {path}#{len(calls)}"
            )
    position, step = calls[index - 1]
    cut = step.checkpoint
    if cut is None:
        raise ForkError(
            f"{path}#{index} {step.status} in run {run_id!r} and committed nothing; fork at a "
            "boundary that completed"
        )
    if cut.kind not in CUT_KINDS:
        raise ForkError(
            f"{path}#{index} is a {cut.kind}; a fork overrides one model call, tool call or "
            "step: name one inside it"
        )
    return cut, f"{path}#{index}", position


def _enclosing(
    cut: Checkpoint, checkpoints: Sequence[Checkpoint], journal: Sequence[BoundaryRecord]
) -> tuple[set[str], str]:
    """The keys of the committed boundaries around ``cut``, and the span id of the run span
    it ran under (the first parent that is no boundary of the run)."""
    committed = {cp.span_id: cp for cp in checkpoints}
    journaled = {record.span_id: record for record in journal}
    enclosing: set[str] = set()
    span_id = cut.parent_span_id
    while span_id is not None:
        if span_id in committed:
            parent = committed[span_id]
            enclosing.add(parent.key)
            span_id = parent.parent_span_id
        elif span_id in journaled:
            span_id = journaled[span_id].parent_span_id
        else:
            return enclosing, span_id
    return enclosing, cut.span_id  # no parent recorded: link to the cut's own span


# --- the override --------------------------------------------------------------------------


def _override(cut: Checkpoint, label: str, output: Any) -> tuple[str, bytes]:
    """The serialized output the cut returns in the fork, checked to read back as what the
    boundary returns."""
    try:
        stored = serde.loads(cut.output_type, cut.output)
    except Exception as exc:
        raise ForkError(
            f"the stored output of {label} cannot be read ({exc}); fork at another boundary"
        ) from exc
    if cut.kind == semconv.KIND_MODEL_CALL:
        value = _model_value(stored, _ai_message(label, output))
    elif cut.kind == semconv.KIND_TOOL_CALL:
        value = _tool_value(stored, label, cut.name, output)
    else:
        value = output
    try:
        output_type, data = serde.dumps(value)
        _check_reads_back(cut.kind, serde.loads(output_type, data))
    except (SerializationError, NotReplayable, TypeError, ValueError) as exc:
        raise ForkError(
            f"the output given for {label} cannot be stored as its result: {exc}"
        ) from exc
    return output_type, data


def _ai_message(label: str, output: Any) -> AIMessage:
    # For import time: `spanpoint show`/`diff` read attempts from here without LangChain.
    from langchain_core.messages import AIMessage

    if isinstance(output, AIMessage):
        return output.model_copy(update={"id": None})
    if isinstance(output, str):
        return AIMessage(content=output)
    if isinstance(output, dict):
        fields = dict(output)
        calls = fields.get("tool_calls")
        if isinstance(calls, list):  # ids are the model's: give each call one if it has none
            fields["tool_calls"] = [
                {"id": f"call_fork_{i}", **c} if isinstance(c, dict) else c
                for i, c in enumerate(calls)
            ]
        try:
            return AIMessage(**fields)
        except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise ForkError(_model_usage(label, f"{exc}")) from exc
    raise ForkError(_model_usage(label, f"not a {type(output).__name__}"))


def _model_usage(label: str, why: str) -> str:
    return (
        f"the output for model call {label} must be the reply's text, or an AIMessage's fields "
        '(for instance {"content": "...", "tool_calls": [{"name": "lookup", "args": {}}]}): ' + why
    )


def _model_value(stored: Any, message: AIMessage) -> Any:
    """``message`` in the shape the cut's output was stored in (``CheckpointMiddleware``'s
    ModelResponse, or the model seam's ChatResult)."""
    if isinstance(stored, dict) and "result" in stored:
        return {"result": [message], "structured_response": None}
    if isinstance(stored, dict) and "generations" in stored:
        generations = stored["generations"]
        info = generations[0][1] if generations and len(generations[0]) > 1 else None
        return {"generations": [[message, info]], "llm_output": stored.get("llm_output")}
    if isinstance(stored, dict) and "value" in stored:
        return {"value": message}
    raise ForkError(
        "this model call's stored output has a shape this spanpoint does not know; fork at a "
        "tool call or a step instead"
    )


def _tool_value(stored: Any, label: str, name: str, output: Any) -> Any:
    """The override in the shape the cut's output was stored in (a whole tool result)."""
    # For import time: `spanpoint show`/`diff` read attempts from here without LangChain.
    from langgraph.types import Command

    from spanpoint.calls import results  # for import time: it loads LangChain

    if isinstance(output, Command):
        answered = _answered_call(output)
        result: Any = output
    else:
        result = _tool_message(label, name, output)
        answered = _CALL_ID
    if not (isinstance(stored, dict) and stored.get("format") == results.FORMAT):
        # Stored as the tool returned it: text stays text.
        return output if isinstance(stored, str) and isinstance(output, str) else result
    try:
        return results.encode_tool_result(result, [], None, tool_call_id=answered)
    except NotReplayable as exc:
        raise ForkError(f"the output given for {label} cannot be replayed: {exc}") from exc


def _tool_message(label: str, name: str, output: Any) -> ToolMessage:
    # For import time: `spanpoint show`/`diff` read attempts from here without LangChain.
    from langchain_core.messages import ToolMessage

    if isinstance(output, ToolMessage):
        return output.model_copy(update={"id": None, "tool_call_id": _CALL_ID})
    fields: dict[str, Any] | None = None
    if isinstance(output, str):
        fields = {"content": output}
    elif isinstance(output, dict) and "content" in output:
        fields = dict(output)
    if fields is not None:
        try:
            return ToolMessage(**{"name": name, **fields, "tool_call_id": _CALL_ID, "id": None})
        except (TypeError, ValueError) as exc:
            raise ForkError(_tool_usage(label, str(exc))) from exc
    raise ForkError(_tool_usage(label, f"not a {type(output).__name__}"))


def _tool_usage(label: str, why: str) -> str:
    return (
        f"the output for tool call {label} must be the tool's result text, a ToolMessage's "
        f'fields (for instance {{"content": "...", "status": "success"}}) or, from Python, a '
        f"ToolMessage or a Command: {why}"
    )


def _answered_call(command: Command[Any]) -> str | None:
    """The tool-call id a ToolMessage in ``command``'s update answers (replay rebinds it)."""
    # For import time: `spanpoint show`/`diff` read attempts from here without LangChain.
    from langchain_core.messages import ToolMessage

    update = command.update
    messages = update.get("messages") if isinstance(update, dict) else None
    for message in messages or ():
        if isinstance(message, ToolMessage):
            return str(message.tool_call_id)
    return None


def _check_reads_back(kind: str, value: Any) -> None:
    """Raise unless ``value`` (as read back from the store) is what the cut's boundary
    returns when it replays: an AIMessage reply, a ToolMessage or Command."""
    # For import time: `spanpoint show`/`diff` read attempts from here without LangChain.
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.types import Command

    from spanpoint.calls import results  # for import time: it loads LangChain

    if kind == semconv.KIND_MODEL_CALL:
        replies = []
        if isinstance(value, dict):
            replies = list(value.get("result") or [])
            replies += [g[0] for g in value.get("generations") or () if g]
            if "value" in value:
                replies.append(value["value"])
        if not replies or not all(isinstance(m, AIMessage) for m in replies):
            raise TypeError("it does not read back as an AIMessage reply")
    elif kind == semconv.KIND_TOOL_CALL:
        if isinstance(value, dict) and value.get("format") == results.FORMAT:
            value = results.replay_tool_result(
                value, input_messages=None, tool_call_id="check", config=None
            )
        if not isinstance(value, str | ToolMessage | Command):
            raise TypeError("it does not read back as a ToolMessage or a Command")


# --- writing -------------------------------------------------------------------------------


def _write(
    store: CheckpointStore, new_run_id: str, name: str | None, writes: Sequence[Checkpoint]
) -> None:
    """Record the new run (no attempt yet, status ``forked``: ``spanpoint runs`` lists it and
    ``spanpoint gc`` collects it, run or not), then put ``writes`` in order, the origin
    record (which makes the run a fork) last."""
    create = capabilities(store).create_run  # a store of the user's may not record one
    try:
        if create and not store.create_run(new_run_id, name, "forked"):  # type: ignore[attr-defined]
            raise ForkError(
                f"run {new_run_id!r} already exists in {store.description}; fork under another "
                "id (new_run_id=..., or --as on the command line)"
            )
    except StoreError as exc:
        raise ForkError(
            f"{store.description} failed to record fork {new_run_id!r} ({exc}); nothing was "
            "written: fork again"
        ) from exc
    for done, cp in enumerate(writes):
        try:
            store.put(cp)
        except StoreError as exc:
            raise ForkError(
                f"{store.description} failed after {done} of the {len(writes)} writes of fork "
                f"{new_run_id!r} ({exc}); fork again under another id"
            ) from exc
