"""``CallCheckpointPolicy``: which model and tool calls are replay boundaries.

Each call gets one of three modes:

- ``"checkpoint"`` (or ``True``): a boundary. Inside a durable run its output is committed
  when its span ends OK, and a replay of the run returns that output without calling again.
- ``"always_execute"``: traced like a boundary (a ``chat``/``execute_tool`` span) but executed
  on every attempt and never committed — for calls whose effect must happen each time, or
  whose result must be fresh (reading a clock, a live price).
- ``"off"`` (or ``False``): spanpoint steps aside; the call is neither a boundary nor a span.

The policy is validated when it is built, so a typo fails at startup, not mid-run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

from spanpoint.errors import ConfigurationError

CallMode = Literal["checkpoint", "always_execute", "off"]
NestedMode = Literal["checkpoint", "trace"]

_MODES: tuple[str, ...] = get_args(CallMode)
_NESTED: tuple[str, ...] = get_args(NestedMode)


def _mode(what: str, value: object) -> CallMode:
    if value is True:
        return "checkpoint"
    if value is False:
        return "off"
    if isinstance(value, str) and value in _MODES:
        return value  # type: ignore[return-value]
    raise ConfigurationError(
        f"{what} must be True, False, 'checkpoint', 'always_execute' or 'off', not {value!r}"
    )


@dataclass(frozen=True, slots=True)
class CallCheckpointPolicy:
    """Which model and tool calls of an agent are replay boundaries.

    Args:
        model_calls: the mode of every model call (default ``"checkpoint"``).
        tool_calls: the mode of tool calls without an override (default ``"checkpoint"``).
        tools: per-tool overrides by tool name, e.g. ``{"send_email": "always_execute"}`` or
            ``{"get_time": False}``.
        nested: what a call opened *inside another boundary* (a graph call, a step, a tool
            that runs a sub-agent) is: ``"checkpoint"`` (default) makes it a boundary of its
            own, so a failed outer boundary resumes from its last completed call; ``"trace"``
            only traces it, leaving the outer boundary the one unit of replay.
        summary: whether ``GraphRunner(strategy="calls")`` writes the aggregate run summary.

    >>> CallCheckpointPolicy(tools={"send_email": "always_execute"})  # doctest: +SKIP
    """

    model_calls: bool | CallMode = "checkpoint"
    tool_calls: bool | CallMode = "checkpoint"
    tools: Mapping[str, bool | CallMode] = field(default_factory=dict)
    nested: NestedMode = "checkpoint"
    summary: bool = True

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "model_calls", _mode("model_calls", self.model_calls))
        set_(self, "tool_calls", _mode("tool_calls", self.tool_calls))
        if not isinstance(self.tools, Mapping):
            raise ConfigurationError(
                "tools must map tool names to modes, e.g. {'send_email': 'always_execute'}, "
                f"not {type(self.tools).__name__}"
            )
        overrides: dict[str, CallMode] = {}
        for name, value in self.tools.items():
            if not isinstance(name, str) or not name:
                raise ConfigurationError(f"tools keys must be tool names, not {name!r}")
            overrides[name] = _mode(f"tools[{name!r}]", value)
        set_(self, "tools", MappingProxyType(overrides))
        if self.nested not in _NESTED:
            raise ConfigurationError(f"nested must be 'checkpoint' or 'trace', not {self.nested!r}")
        if not isinstance(self.summary, bool):
            raise ConfigurationError(f"summary must be True or False, not {self.summary!r}")

    def model_mode(self) -> CallMode:
        """The mode of a model call."""
        return self.model_calls  # type: ignore[return-value]

    def tool_mode(self, tool_name: str) -> CallMode:
        """The mode of a call to ``tool_name``: its override, else ``tool_calls``."""
        return self.tools.get(tool_name, self.tool_calls)  # type: ignore[return-value]

    def __repr__(self) -> str:
        return (
            f"CallCheckpointPolicy(model_calls={self.model_calls!r}, "
            f"tool_calls={self.tool_calls!r}, tools={dict(self.tools)!r}, "
            f"nested={self.nested!r}, summary={self.summary!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            CallCheckpointPolicy,
            (self.model_calls, self.tool_calls, dict(self.tools), self.nested, self.summary),
        )
