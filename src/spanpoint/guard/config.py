"""``GuardConfig``: what the guard watches for, which budgets it enforces, and how it speaks.

Every field is validated when the config is built, so a bad value fails at start-up with a
message naming the field and the fix, never in the middle of an agent run.
"""

from __future__ import annotations

import importlib.util
import math
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal

from spanpoint.errors import ConfigurationError

# Detector patterns (values of spanpoint.guard.pattern).
TOOL_REPEAT: Final = "tool_repeat"
CYCLE: Final = "cycle"
NO_PROGRESS: Final = "no_progress"
ERROR_LOOP: Final = "error_loop"
PATTERNS: Final = (TOOL_REPEAT, CYCLE, NO_PROGRESS, ERROR_LOOP)

# Hard budgets (values of spanpoint.guard.reason for a budget stop).
MAX_STEPS: Final = "max_steps"
MAX_TOKENS: Final = "max_tokens"
MAX_COST: Final = "max_cost"
MAX_WALL_SECONDS: Final = "max_wall_seconds"
BUDGETS: Final = (MAX_STEPS, MAX_TOKENS, MAX_COST, MAX_WALL_SECONDS)

GuardMode = Literal["enforce", "observe"]

# The only fields a template may use: tool names and numbers, never arguments or tool
# output, so a reflection cannot carry injected text from a tool back into the prompt.
REFLECTION_FIELDS: Final = frozenset(
    {"tool", "tools", "count", "sequence", "period", "repeats", "steps", "remaining"}
)
TERMINATION_FIELDS: Final = REFLECTION_FIELDS | {"used", "limit", "estimated"}


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Per-tool exceptions to the detectors.

    ``allow_repeat=True`` takes the tool out of repeat and cycle detection (a polling tool
    such as ``job_status`` may be called with the same arguments many times).
    ``repeat_threshold`` replaces ``GuardConfig.tool_repeat_threshold`` for this tool.
    ``count_errors=False`` keeps this tool's failures out of the error-loop count.
    """

    allow_repeat: bool = False
    repeat_threshold: int | None = None
    count_errors: bool = True

    def __post_init__(self) -> None:
        if self.repeat_threshold is not None:
            _require_int("ToolPolicy.repeat_threshold", self.repeat_threshold, minimum=2)


@dataclass(frozen=True, slots=True)
class TokenPrice:
    """A custom price in US dollars per token; overrides the pricing library for a model.

    ``cached_input`` prices input tokens served from the provider's prompt cache (defaults
    to the ``input`` price).
    """

    input: float
    output: float
    cached_input: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if value is None and name == "cached_input":
                continue
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigurationError(
                    f"TokenPrice.{name} must be a finite number of dollars per token >= 0, "
                    f"got {value!r}"
                )


@dataclass(frozen=True, slots=True)
class GuardConfig:
    """What the guard detects, which budgets it enforces, and what it tells the model.

    Detectors (each ``None`` or ``0`` where noted disables it):

    * ``tool_repeat_threshold`` (default 3): this many calls of one tool with identical
      arguments (key order and whitespace irrelevant) among the last ``tool_repeat_window``
      tool calls (default 20) is a ``tool_repeat`` detection. ``None`` disables it.
    * ``cycle_max_period`` (default 6) and ``cycle_repeats`` (default 2): a sequence of 2 to
      ``cycle_max_period`` distinct tool calls repeated ``cycle_repeats`` times back to back
      at the end of the run's call history (A→B→C→A→B→C) is a ``cycle``. ``None`` disables.
    * ``no_progress_steps`` (default 5): this many consecutive steps whose tool results were
      all already seen in this run (or failed) is ``no_progress``. ``None`` disables it.
    * ``error_loop_threshold`` (default 3): this many consecutive failing tool calls is an
      ``error_loop``. ``None`` disables it.

    Budgets (hard stops, never resumable; ``None`` = unlimited, the default for all but steps):

    * ``max_steps`` (default 50): model calls per run.
    * ``max_tokens_per_run``: tokens from the messages' ``usage_metadata``; when a model
      reports none, ``len(text) / chars_per_token`` is used and the run is marked estimated.
    * ``max_cost_usd``: dollars, priced by the ``genai-prices`` library (extra
      ``spanpoint[guard]``); ``model_prices`` (model name → :class:`TokenPrice`) overrides it.
      ``track_cost`` (default: on when ``max_cost_usd`` is set) prices calls without a budget.
    * ``max_wall_seconds``: seconds the run has been executing (time between a stop and a
      resume does not count).

    Behaviour:

    * ``max_reflections`` (default 1): reflection messages per episode (from a detection to
      the step that recovers); one more detection after that stops the run.
    * ``tool_policies``: tool name → :class:`ToolPolicy`.
    * ``mode``: ``"enforce"`` (default) reflects and stops; ``"observe"`` only records.
    * ``reflection_templates`` / ``termination_templates``: pattern or budget name → text
      with ``{tool}``, ``{count}``, … placeholders; replaces the built-in wording.
    * ``chars_per_token`` (default 4.0): the estimate used only when usage is not reported.
    """

    tool_repeat_threshold: int | None = 3
    tool_repeat_window: int = 20
    cycle_max_period: int | None = 6
    cycle_repeats: int = 2
    no_progress_steps: int | None = 5
    error_loop_threshold: int | None = 3
    max_steps: int | None = 50
    max_tokens_per_run: int | None = None
    max_cost_usd: float | None = None
    max_wall_seconds: float | None = None
    max_reflections: int = 1
    tool_policies: Mapping[str, ToolPolicy] = field(default_factory=dict)
    model_prices: Mapping[str, TokenPrice] = field(default_factory=dict)
    track_cost: bool | None = None
    mode: GuardMode = "enforce"
    reflection_templates: Mapping[str, str] = field(default_factory=dict)
    termination_templates: Mapping[str, str] = field(default_factory=dict)
    chars_per_token: float = 4.0

    def __post_init__(self) -> None:
        _validate_detectors(self)
        _validate_budgets(self)
        if self.mode not in ("enforce", "observe"):
            raise ConfigurationError(
                f"GuardConfig.mode must be 'enforce' or 'observe', got {self.mode!r}"
            )
        _require_int("GuardConfig.max_reflections", self.max_reflections, minimum=0)
        _freeze_mapping(self, "tool_policies", ToolPolicy)
        _freeze_mapping(self, "model_prices", TokenPrice)
        _validate_templates(self, "reflection_templates", PATTERNS, REFLECTION_FIELDS)
        _validate_templates(self, "termination_templates", PATTERNS + BUDGETS, TERMINATION_FIELDS)
        # Without the library, custom prices must cover the models; with neither, say so now.
        no_library = importlib.util.find_spec("genai_prices") is None
        if self.costs_tracked and no_library and not self.model_prices:
            raise ConfigurationError(
                "GuardConfig cost tracking needs model prices: install the pricing "
                "library with `pip install 'spanpoint[guard]'` or pass "
                "model_prices={'model-name': TokenPrice(input=..., output=...)}"
            )

    @property
    def enforcing(self) -> bool:
        """True when the guard reflects and stops (``mode="enforce"``)."""
        return self.mode == "enforce"

    @property
    def costs_tracked(self) -> bool:
        """True when each model call is priced (a cost budget is set, or ``track_cost``)."""
        return self.track_cost if self.track_cost is not None else self.max_cost_usd is not None

    def policy(self, tool: str) -> ToolPolicy | None:
        """The :class:`ToolPolicy` for ``tool``, if one was configured."""
        return self.tool_policies.get(tool)


def _validate_detectors(cfg: GuardConfig) -> None:
    for name in ("tool_repeat_threshold", "error_loop_threshold"):
        value = getattr(cfg, name)
        if value is not None:
            _require_int(f"GuardConfig.{name}", value, minimum=2 if "repeat" in name else 1)
    if cfg.no_progress_steps is not None:
        _require_int("GuardConfig.no_progress_steps", cfg.no_progress_steps, minimum=1)
    _require_int("GuardConfig.tool_repeat_window", cfg.tool_repeat_window, minimum=2)
    if cfg.tool_repeat_threshold is not None and cfg.tool_repeat_window < cfg.tool_repeat_threshold:
        raise ConfigurationError(
            f"GuardConfig.tool_repeat_window ({cfg.tool_repeat_window}) must be at least "
            f"tool_repeat_threshold ({cfg.tool_repeat_threshold}), or repeats never fit in it"
        )
    if cfg.cycle_max_period is not None:
        _require_int("GuardConfig.cycle_max_period", cfg.cycle_max_period, minimum=2)
    _require_int("GuardConfig.cycle_repeats", cfg.cycle_repeats, minimum=2)


def _validate_budgets(cfg: GuardConfig) -> None:
    for name in ("max_steps", "max_tokens_per_run"):
        value = getattr(cfg, name)
        if value is not None:
            _require_int(f"GuardConfig.{name}", value, minimum=1)
    for name in ("max_cost_usd", "max_wall_seconds", "chars_per_token"):
        value = getattr(cfg, name)
        if value is None and name != "chars_per_token":
            continue
        if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise ConfigurationError(
                f"GuardConfig.{name} must be a finite number > 0 (or None for no limit), "
                f"got {value!r}"
            )


def _require_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _freeze_mapping(cfg: GuardConfig, name: str, kind: type) -> None:
    value = getattr(cfg, name)
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"GuardConfig.{name} must be a mapping, got {value!r}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, kind):
            raise ConfigurationError(
                f"GuardConfig.{name} maps names (str) to {kind.__name__}, got {key!r}: {item!r}"
            )
    # Frozen dataclass: the copy keeps a later mutation of the caller's dict out of the guard.
    object.__setattr__(cfg, name, MappingProxyType(dict(value)))


def _validate_templates(
    cfg: GuardConfig, name: str, allowed_keys: tuple[str, ...], fields: frozenset[str]
) -> None:
    _freeze_mapping(cfg, name, str)
    for key, template in getattr(cfg, name).items():
        if key not in allowed_keys:
            raise ConfigurationError(
                f"GuardConfig.{name} has unknown key {key!r}; use one of {', '.join(allowed_keys)}"
            )
        try:
            used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
        except ValueError as exc:
            raise ConfigurationError(
                f"GuardConfig.{name}[{key!r}] is not a valid template: {exc}"
            ) from None
        unknown = {f.split(".")[0].split("[")[0] for f in used} - fields - {""}
        if unknown or "" in used:
            bad = ", ".join(sorted(unknown)) or "{}"
            raise ConfigurationError(
                f"GuardConfig.{name}[{key!r}] uses unknown placeholder(s) {bad}; "
                f"allowed: {', '.join(sorted(fields))}"
            )
