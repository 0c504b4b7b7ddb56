"""The four loop detectors: tool repeat, cycle, no progress, error loop.

They are pure functions over the run's bounded call history and counters (kept in graph
state by the caller), so each one can be tested on plain lists. Every tool call of a turn is
analysed, parallel calls and duplicates inside one turn included.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import ormsgpack

from spanpoint.guard.config import CYCLE, ERROR_LOOP, NO_PROGRESS, TOOL_REPEAT, GuardConfig

# How many result fingerprints the no-progress detector remembers per run (they are
# checkpointed with the thread every step, so the record stays short).
SEEN_RESULTS_LIMIT = 128
# The record is one string, each fingerprint (a CRC-32, 8 hex digits) led by a comma: a
# membership test is one substring search in C instead of up to 128 string comparisons in
# Python. A CRC collision (about 3e-8 per result with a full record) counts one step as
# bringing nothing new; it takes ``no_progress_steps`` such steps in a row to matter.
_FINGERPRINT_WIDTH = 9
_SEEN_CHARS = SEEN_RESULTS_LIMIT * _FINGERPRINT_WIDTH

# Call keys are computed for every tool call of every step: msgpack with sorted keys (in C,
# several times faster than sorted JSON); JSON only for what msgpack cannot encode.
# The digest is the CRC-32 and the length of that encoding: two different calls of one tool
# share a key about once in 4e9 pairs, and a false repeat needs ``tool_repeat_threshold``
# of them in one window.
_ARGS_OPTIONS = ormsgpack.OPT_SORT_KEYS
_ARGS_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True, slots=True)
class Detection:
    """One detector firing: which pattern, on which tools, and the evidence for it.

    ``evidence`` is a one-line summary built from tool names and counts only (never tool
    arguments or output). ``fields`` are the template values for the reflection text.
    ``confidence`` is 1.0 for these structural detectors, which match exactly.
    """

    pattern: str
    evidence: str
    tools: tuple[str, ...]
    fields: Mapping[str, Any] = field(default_factory=dict)
    confidence: float = 1.0

    def to_dict(self, step: int) -> dict[str, Any]:
        """A JSON-safe record of this detection at ``step``."""
        return {
            "pattern": self.pattern,
            "step": step,
            "tools": list(self.tools),
            "evidence": self.evidence,
            "confidence": self.confidence,
        }


class ToolResult(NamedTuple):
    """A tool call's outcome as the detectors see it."""

    tool: str
    content: str
    is_error: bool


def call_key(tool: str, args: Any) -> str:
    """A short identity for a tool call: its name and a checksum of its normalized arguments.

    Arguments are JSON with sorted keys, so ``{"a": 1, "b": 2}`` and ``{"b": 2, "a": 1}``
    are the same call.
    """
    try:
        data = ormsgpack.packb(args, option=_ARGS_OPTIONS, default=str)
    except TypeError:  # e.g. an integer beyond 64 bits, or keys of mixed types
        data = b"j" + _ARGS_ENCODER.encode(args).encode()
    return f"{tool}#{zlib.crc32(data):08x}{len(data):x}"


def tool_of(key: str) -> str:
    """The tool name inside a :func:`call_key`."""
    return key.rpartition("#")[0]


def detect_repeat(
    recent: Sequence[str], new_keys: Sequence[str], cfg: GuardConfig
) -> Detection | None:
    """``tool_repeat`` if a call of this turn now occurs too often in the recent window."""
    if cfg.tool_repeat_threshold is None or not new_keys:
        return None
    size = cfg.tool_repeat_window
    window = recent if len(recent) <= size else recent[-size:]
    policies = cfg.tool_policies
    if len(new_keys) == 1 and not policies:  # the common turn: one call, no per-tool policy
        key = new_keys[0]
        count = window.count(key)
        if count < cfg.tool_repeat_threshold:
            return None
    else:
        worst: tuple[int, str] | None = None
        for key in dict.fromkeys(new_keys):
            policy = policies.get(tool_of(key)) if policies else None
            threshold = cfg.tool_repeat_threshold
            if policy is not None:
                if policy.allow_repeat:
                    continue
                threshold = policy.repeat_threshold or threshold
            count = window.count(key)
            if count >= threshold and (worst is None or count > worst[0]):
                worst = (count, key)
        if worst is None:
            return None
        count, key = worst
    tool = tool_of(key)
    in_turn = new_keys.count(key)
    return Detection(
        pattern=TOOL_REPEAT,
        evidence=(
            f"{tool} called {count} times with identical arguments in the last "
            f"{len(window)} tool calls ({in_turn} in this step)"
        ),
        tools=(tool,),
        fields={"tool": tool, "tools": tool, "count": count},
    )


def detect_cycle(recent: Sequence[str], cfg: GuardConfig) -> Detection | None:
    """``cycle`` if the history ends with a block of 2+ distinct calls repeated back to back."""
    if cfg.cycle_max_period is None:
        return None
    repeats = cfg.cycle_repeats
    if len(recent) < 2 * repeats:
        return None
    last = recent[-1]
    # Cheap necessary condition first: the newest call recurs in the longest cycle's span.
    if recent[-cfg.cycle_max_period * repeats :].count(last) < repeats:
        return None
    for period in range(2, cfg.cycle_max_period + 1):
        span = period * repeats
        if len(recent) < span:
            break
        # Cheap necessary condition first: the newest call recurs one period earlier.
        if recent[-1 - period] != last:
            continue
        block = recent[-period:]
        if len(set(block)) < 2:
            continue
        tail = recent[-span:]
        if all(tail[i] == block[i % period] for i in range(span - period)):
            names = tuple(tool_of(k) for k in block)
            sequence = " → ".join(names)
            return Detection(
                pattern=CYCLE,
                evidence=f"the sequence {sequence} repeated {repeats} times in a row",
                tools=tuple(dict.fromkeys(names)),
                fields={
                    "tool": names[0],
                    "tools": ", ".join(dict.fromkeys(names)),
                    "sequence": sequence,
                    "period": period,
                    "repeats": repeats,
                    "count": span,
                },
            )
    return None


def ingest_results(
    counters: MutableMapping[str, Any],
    results: Sequence[ToolResult | tuple[str, str, bool]],
    cfg: GuardConfig,
) -> list[Detection]:
    """Fold one step's tool results into the counters; return error-loop / no-progress hits.

    ``results`` are :class:`ToolResult` values or plain ``(tool, content, is_error)`` tuples.
    ``counters`` holds ``consecutive_errors``, ``error_tools``, ``seen_results`` and
    ``no_progress_steps``; its values are replaced, never mutated (pass a shallow copy).
    """
    if not results:
        return []
    seen = counters["seen_results"]
    if not isinstance(seen, str):  # a list of fingerprints: a state from an earlier version
        seen = "".join(f",{fingerprint}" for fingerprint in seen)
    consecutive = counters["consecutive_errors"]
    error_tools = counters["error_tools"]
    new = ""
    errors = 0
    for tool, content, is_error in results:
        if is_error:
            policy = cfg.policy(tool) if cfg.tool_policies else None
            if policy is None or policy.count_errors:
                errors += 1
                consecutive += 1
                error_tools = [*error_tools[-4:], tool]
            continue
        consecutive = 0
        if error_tools:
            error_tools = []
        fingerprint = f",{zlib.crc32((tool + chr(0) + content).encode()):08x}"
        if fingerprint not in seen and fingerprint not in new:
            new += fingerprint
    counters["consecutive_errors"] = consecutive
    if error_tools is not counters["error_tools"]:
        counters["error_tools"] = error_tools
    if new:
        counters["seen_results"] = (seen + new)[-_SEEN_CHARS:]
        counters["no_progress_steps"] = 0
    else:
        counters["no_progress_steps"] += 1
    found = []
    if errors and (hit := _error_loop(counters, cfg)) is not None:
        found.append(hit)
    if cfg.no_progress_steps is not None and counters["no_progress_steps"] >= cfg.no_progress_steps:
        found.append(_no_progress(counters, results))
    return found


def _error_loop(counters: Mapping[str, Any], cfg: GuardConfig) -> Detection | None:
    count = counters["consecutive_errors"]
    if cfg.error_loop_threshold is None or count < cfg.error_loop_threshold:
        return None
    tools = tuple(dict.fromkeys(counters["error_tools"]))
    return Detection(
        pattern=ERROR_LOOP,
        evidence=f"{count} consecutive tool calls failed ({', '.join(tools)})",
        tools=tools,
        fields={"tool": tools[0], "tools": ", ".join(tools), "count": count},
    )


def _no_progress(
    counters: Mapping[str, Any], results: Sequence[ToolResult | tuple[str, str, bool]]
) -> Detection:
    steps = counters["no_progress_steps"]
    tools = tuple(dict.fromkeys(result[0] for result in results))
    return Detection(
        pattern=NO_PROGRESS,
        evidence=f"{steps} consecutive steps returned no new tool results",
        tools=tools,
        fields={"tool": tools[0], "tools": ", ".join(tools), "steps": steps},
    )
