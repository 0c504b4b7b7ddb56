"""What model calls cost: per call (span attributes) and per run (executed, replayed, saved).

A call's cost is priced from the token usage its provider reported (``usage_metadata``) by
``genai-prices``, the maintained price table the guard uses (extra ``spanpoint[guard]``), the
way the guard prices it (``spanpoint.guard.budgets``; a test holds the two equal). Prices are
in US dollars. Nothing here imports LangChain: the CLI's store commands total a run without
it, reading stored outputs as plain data.

A model the table does not know (a fake, a private deployment), or no price library
installed, gets no amount: its span carries ``spanpoint.cost.unpriced=true`` and no
``gen_ai.usage.cost.*``, and run totals count it under ``unpriced`` — never a guessed price.

Run totals are read from the checkpoint store, so they are the same in the process that ran
the run and in ``spanpoint show`` later: the *executed* model calls are the run's committed
model-call checkpoints, the *replayed* ones are the journal's replayed model calls (each
priced by the checkpoint it replayed). What replay saved is the replayed calls' cost.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ormsgpack

from spanpoint import _prices, semconv
from spanpoint.serde import MESSAGE_EXTENSION
from spanpoint.stores.base import BoundaryRecord, Checkpoint, CheckpointStore

CURRENCY = "USD"


@dataclass(frozen=True, slots=True)
class CallCost:
    """Tokens and cost of one model call; ``amount`` is None when its model is not priced."""

    input_tokens: int
    output_tokens: int
    amount: float | None
    model: str | None
    currency: str = CURRENCY


def message_cost(message: Any) -> CallCost | None:
    """The cost of the call that produced ``message`` (an ``AIMessage``, or its fields as a
    mapping); None when it reports no usage."""
    fields = message if isinstance(message, Mapping) else getattr(message, "__dict__", {})
    usage = fields.get("usage_metadata")
    if not usage:
        return None
    meta = fields.get("response_metadata") or {}
    model = meta.get("model_name") or meta.get("model")
    details = usage.get("input_token_details") or {}
    inp, out = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    cached = int(details.get("cache_read") or 0)
    provider = meta.get("model_provider")
    amount = price(str(model), provider, inp, out, cached) if model else None
    return CallCost(inp, out, amount, str(model) if model else None)


def price(model: str, provider: str | None, inp: int, out: int, cached: int) -> float | None:
    """US dollars for one call by genai-prices, None when the model is not in its table (or
    the library is not installed: extra ``spanpoint[guard]``); the guard prices the same way
    (both use :mod:`spanpoint._prices`)."""
    return _prices.price(model, provider, inp, out, cached)


def priced_attributes(cost: CallCost | None) -> dict[str, Any]:
    """``gen_ai.usage.cost.*`` of a model call's span (or ``spanpoint.cost.unpriced``), from
    the cost :func:`message_cost` computed for its reply."""
    if cost is None:
        return {}
    if cost.amount is None:
        return {semconv.COST_UNPRICED: True}
    return {
        semconv.GEN_AI_USAGE_COST_AMOUNT: cost.amount,
        semconv.GEN_AI_USAGE_COST_CURRENCY: cost.currency,
        semconv.GEN_AI_USAGE_COST_SOURCE: semconv.COST_SOURCE_LOCAL,
    }


def saved_attributes(cost: CallCost | None) -> dict[str, Any]:
    """``spanpoint.replay.saved.cost.*`` of a replayed model call's span (or
    ``spanpoint.cost.unpriced``): what the call cost when it ran, not paid again."""
    if cost is None:
        return {}
    if cost.amount is None:
        return {semconv.COST_UNPRICED: True}
    return {
        semconv.REPLAY_SAVED_COST: cost.amount,
        semconv.REPLAY_SAVED_COST_CURRENCY: cost.currency,
    }


def output_cost(output: Any) -> CallCost | None:
    """The cost of a model call from its output (a ``ModelResponse``, its encoded form as
    stored, a ``ChatResult``'s parts, or an ``AIMessage``): its last AI message's."""
    found = None
    for message in _ai_messages(output, 0):
        found = message
    return message_cost(found) if found is not None else None


def _ai_messages(value: Any, depth: int) -> Iterable[Any]:
    """AI messages in ``value``, in order: objects, or the fields of a stored one."""
    if depth > 8:
        return
    if getattr(value, "type", None) == "ai" and hasattr(value, "usage_metadata"):
        yield value
    elif isinstance(value, _Stored):
        if value.name in ("AIMessage", "AIMessageChunk") and isinstance(value.fields, Mapping):
            yield value.fields
        else:
            yield from _ai_messages(value.fields, depth + 1)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _ai_messages(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _ai_messages(item, depth + 1)
    else:
        result = getattr(value, "result", None)  # a ModelResponse
        if isinstance(result, list):
            yield from _ai_messages(result, depth + 1)


class _Stored:
    """An object as LangGraph's serializer stored it (module, class name, fields), unrevived:
    totals read a checkpoint without importing LangChain (the CLI's store commands)."""

    __slots__ = ("fields", "name")

    def __init__(self, name: str, fields: Any) -> None:
        self.name, self.fields = name, fields


def _stored(code: int, data: bytes) -> Any:
    value = ormsgpack.unpackb(data, ext_hook=_stored)
    if isinstance(value, list | tuple) and len(value) >= 3 and isinstance(value[1], str):
        fields = value[2]
        if code == MESSAGE_EXTENSION and isinstance(fields, dict):
            fields = fields.get("fields")  # spanpoint's exact message: its fields, and which set
        return _Stored(value[1], fields)
    return value


@dataclass(slots=True)
class Totals:
    """Model calls, their tokens and their priced cost (``unpriced``: calls with no price)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    unpriced: int = 0

    def add(self, cost: CallCost | None) -> None:
        """Count one model call."""
        self.calls += 1
        if cost is None:
            self.unpriced += 1
            return
        self.input_tokens += cost.input_tokens
        self.output_tokens += cost.output_tokens
        if cost.amount is None:
            self.unpriced += 1
        else:
            self.cost += cost.amount

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def summary(self) -> str:
        """``3 calls, 1,234 tok, $0.012300 (1 unpriced)``: the form every CLI command prints."""
        text = f"{self.calls} calls, {self.tokens:,} tok, ${self.cost:.6f}"
        return text + (f" ({self.unpriced} unpriced)" if self.unpriced else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form."""
        return {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": self.cost,
            "unpriced": self.unpriced,
        }


@dataclass(slots=True)
class RunCost:
    """Executed and replayed model calls of a run (or of one attempt), and what replay saved."""

    executed: Totals = field(default_factory=Totals)
    replayed: Totals = field(default_factory=Totals)
    currency: str = CURRENCY

    @property
    def saved(self) -> float:
        """The cost of the replayed calls: what they would have cost executed again."""
        return self.replayed.cost

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (the run summary's ``cost``)."""
        return {
            "currency": self.currency,
            "executed": self.executed.to_dict(),
            "replayed": self.replayed.to_dict(),
            "saved": self.saved,
        }

    def span_attributes(self) -> dict[str, Any]:
        """The run root span's totals: under spanpoint's names only, never the GenAI
        ``gen_ai.usage.*`` ones (its model calls' spans carry those; a parent summing them
        under the same names would be counted again by a backend that sums them)."""
        return {
            semconv.RUN_EXECUTED_COST: self.executed.cost,
            semconv.RUN_EXECUTED_TOKENS: self.executed.tokens,
            semconv.RUN_REPLAYED_TOKENS: self.replayed.tokens,
            semconv.RUN_SAVED_COST: self.saved,
            semconv.RUN_COST_CURRENCY: self.currency,
        }


def _checkpoint_cost(cp: Checkpoint) -> CallCost | None:
    if cp.output_type != "msgpack":
        return None
    # A run's totals are read again after each of its graph calls (graph/summary.py): each
    # checkpoint is decoded and priced once per process, not once per graph call (else a
    # run's k-th graph call would decode all k of them: quadratic in the run's length).
    # Keyed by the output's bytes too: one key, two stores, two outputs stay two prices.
    memo_key = (cp.key, cp.output)
    if memo_key in _PRICED:
        return _PRICED[memo_key]
    try:
        found = output_cost(ormsgpack.unpackb(cp.output, ext_hook=_stored))
    except Exception:  # an unreadable checkpoint is counted, unpriced, never a crash
        found = None
    if len(_PRICED) >= _MAX_PRICED:
        _PRICED.clear()
    _PRICED[memo_key] = found
    return found


_PRICED: dict[tuple[str, bytes], CallCost | None] = {}
_MAX_PRICED = 16384


def remember(cp: Checkpoint, cost: CallCost | None) -> None:
    """Keep ``cost`` as the price of ``cp``: what :func:`_checkpoint_cost` would read back
    from its stored bytes, given by whoever priced the live output it was serialized from
    (the middleware, whose span already carries that cost) so that it is not decoded again.
    The caller vouches for the equality (``calls.middleware``: only outputs whose stored form
    reads back to the same usage fields)."""
    if cp.output_type != "msgpack":
        return
    if len(_PRICED) >= _MAX_PRICED:
        _PRICED.clear()
    _PRICED[(cp.key, cp.output)] = cost


def attempt_cost(model_calls: Iterable[tuple[bool, Checkpoint]]) -> RunCost:
    """Totals of an open attempt's model calls, each ``(replayed, checkpoint)`` as the run
    kept them (``RunScope.model_calls``): what :func:`run_cost` reads back from the store for
    that attempt once the run has ended, without reading the store."""
    totals = RunCost()
    for replayed, cp in model_calls:
        (totals.replayed if replayed else totals.executed).add(_checkpoint_cost(cp))
    return totals


def scope_cost(scope: Any) -> RunCost:
    """:func:`attempt_cost` of an open attempt's model calls (``RunScope.model_calls``), adding
    only the calls kept since the last time.

    A run's totals are read after each of its graph calls (``graph.summary``) and at its end:
    totalling every call again made a run's k-th graph call cost O(k), the whole run O(k²)
    (70 checkpoints looked at per invoke in a 20-invoke run). ``model_calls`` only grows, in
    completion order, so the running totals of its first ``n`` calls plus the rest, added in
    the same order, are :func:`attempt_cost`'s totals to the last bit. A copy is returned.
    """
    calls = scope.model_calls
    key = id(scope)
    with _SCOPE_LOCK:
        entry = _SCOPE_TOTALS.get(key)
        if entry is not None and entry[0]() is scope:
            ref, done, totals = entry
        else:
            try:
                ref = weakref.ref(scope, lambda gone: _forget_scope(key, gone))
            except TypeError:  # not weak-referenceable: total it all each time
                return attempt_cost(list(calls))
            done, totals = 0, RunCost()
        # One slice: atomic under the GIL while another thread of the run appends.
        new = calls[done:]
        for replayed, cp in new:
            (totals.replayed if replayed else totals.executed).add(_checkpoint_cost(cp))
        _SCOPE_TOTALS[key] = (ref, done + len(new), totals)
        return RunCost(_copy(totals.executed), _copy(totals.replayed), totals.currency)


def _copy(totals: Totals) -> Totals:
    return Totals(
        totals.calls, totals.input_tokens, totals.output_tokens, totals.cost, totals.unpriced
    )


def _forget_scope(key: int, ref: weakref.ref[Any]) -> None:
    with _SCOPE_LOCK:
        entry = _SCOPE_TOTALS.get(key)
        if entry is not None and entry[0] is ref:  # not a newer scope that got the same id
            del _SCOPE_TOTALS[key]


# id(scope) -> (weak ref to the scope, how many of its model calls are totalled, totals).
_SCOPE_TOTALS: dict[int, tuple[weakref.ref[Any], int, RunCost]] = {}
_SCOPE_LOCK = threading.RLock()  # reentrant: a weak ref callback may run inside it (GC)


def set_run_totals(scope: Any, span: Any) -> None:
    """Set the attempt's cost totals on its run span (``run.on_run_end``): executed, replayed
    and saved, from the model calls the attempt kept (:func:`scope_cost`)."""
    span.set_attributes(scope_cost(scope).span_attributes())


def run_cost(
    store: CheckpointStore,
    run_id: str,
    *,
    attempt: int | None = None,
    journal: Iterable[BoundaryRecord] | None = None,
) -> RunCost:
    """Totals of ``run_id`` (of one ``attempt`` when given) from ``store``.

    ``journal``: the replayed boundaries when they are not in the store yet (the run is still
    open: its journal is written when it ends); else the store's journal is read.
    """
    checkpoints = {cp.key: cp for cp in store.list_checkpoints(run_id)}
    totals = RunCost()
    for cp in checkpoints.values():
        # Attempt 0: a fork's copy of the original's call (spanpoint.forks), paid by the
        # original run; the fork counts it when it replays it.
        if cp.kind == semconv.KIND_MODEL_CALL and cp.attempt and attempt in (None, cp.attempt):
            totals.executed.add(_checkpoint_cost(cp))
    records = store.list_journal(run_id) if journal is None else journal
    for record in records:
        if record.kind != semconv.KIND_MODEL_CALL or record.status != "replayed":
            continue
        if attempt not in (None, record.attempt):
            continue
        found = checkpoints.get(record.key)
        totals.replayed.add(_checkpoint_cost(found) if found is not None else None)
    return totals
