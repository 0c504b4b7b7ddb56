"""Hard budgets: steps, tokens (from real usage metadata), cost (priced by a library), time.

Tokens come from each AI message's ``usage_metadata`` as the provider reported them. Only
when a model reports nothing is a character-based estimate used, and the run is then marked
``tokens_estimated`` everywhere it is reported. Cost is priced by ``genai-prices`` (a
maintained price table, extra ``spanpoint[guard]``) unless ``GuardConfig.model_prices`` names
the model; the ``"*"`` entry there prices any model the table does not know.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage

from spanpoint import _prices
from spanpoint.guard.config import (
    MAX_COST,
    MAX_STEPS,
    MAX_TOKENS,
    MAX_WALL_SECONDS,
    GuardConfig,
    TokenPrice,
)


class Usage(NamedTuple):
    """Token usage of one model call, and whether it was reported or estimated."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    estimated: bool
    model: str | None
    provider: str | None

    @property
    def total(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


class Overrun(NamedTuple):
    """A budget that has been reached: which one, how much was used, and the limit."""

    budget: str
    used: float
    limit: float


def usage_of(message: BaseMessage, prompt: Sequence[BaseMessage], cfg: GuardConfig) -> Usage:
    """The usage of the call that produced ``message`` (``prompt`` is what the model saw)."""
    metadata = message.response_metadata or {}
    model = metadata.get("model_name") or metadata.get("model")
    provider = metadata.get("model_provider")
    reported: Mapping[str, Any] | None = getattr(message, "usage_metadata", None)
    if reported:
        details = reported.get("input_token_details") or {}
        return Usage(
            int(reported.get("input_tokens") or 0),
            int(reported.get("output_tokens") or 0),
            int(details.get("cache_read") or 0),
            False,
            model,
            provider,
        )
    # Nothing reported: estimate from the text, and say so.
    prompt_chars = sum(len(m.text) for m in prompt)
    output_chars = len(message.text) + sum(
        len(str(call.get("args"))) for call in getattr(message, "tool_calls", None) or ()
    )
    return Usage(
        round(prompt_chars / cfg.chars_per_token),
        round(output_chars / cfg.chars_per_token),
        0,
        True,
        model,
        provider,
    )


def cost_of(usage: Usage, cfg: GuardConfig) -> float | None:
    """The call's cost in US dollars, or ``None`` when no price is known for its model."""
    custom = cfg.model_prices.get(usage.model or "")
    if custom is None and usage.model:
        library = _library_cost(usage)
        if library is not None:
            return library
    custom = custom or cfg.model_prices.get("*")
    return None if custom is None else _custom_cost(usage, custom)


def _custom_cost(usage: Usage, price: TokenPrice) -> float:
    cached_price = price.input if price.cached_input is None else price.cached_input
    fresh_input = max(usage.input_tokens - usage.cache_read_tokens, 0)
    return (
        fresh_input * price.input
        + usage.cache_read_tokens * cached_price
        + usage.output_tokens * price.output
    )


def _library_cost(usage: Usage) -> float | None:
    return _prices.price(
        usage.model or "",
        usage.provider,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
    )


def overrun_before_model(counters: Mapping[str, Any], cfg: GuardConfig) -> Overrun | None:
    """A step or time budget that forbids the next model call, if any."""
    if cfg.max_steps is not None and counters["steps"] >= cfg.max_steps:
        return Overrun(MAX_STEPS, counters["steps"], cfg.max_steps)
    if cfg.max_wall_seconds is not None and counters["wall_seconds"] >= cfg.max_wall_seconds:
        return Overrun(MAX_WALL_SECONDS, counters["wall_seconds"], cfg.max_wall_seconds)
    return None


def overrun_after_model(counters: Mapping[str, Any], cfg: GuardConfig) -> Overrun | None:
    """A token or cost budget the last model call went over, if any."""
    if cfg.max_tokens_per_run is not None and counters["tokens"] > cfg.max_tokens_per_run:
        return Overrun(MAX_TOKENS, counters["tokens"], cfg.max_tokens_per_run)
    if cfg.max_cost_usd is not None and counters["cost_usd"] > cfg.max_cost_usd:
        return Overrun(MAX_COST, counters["cost_usd"], cfg.max_cost_usd)
    if cfg.max_wall_seconds is not None and counters["wall_seconds"] >= cfg.max_wall_seconds:
        return Overrun(MAX_WALL_SECONDS, counters["wall_seconds"], cfg.max_wall_seconds)
    return None
