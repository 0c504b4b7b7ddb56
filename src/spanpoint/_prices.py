"""One way to price a model call: ``genai-prices``, the maintained table (extra
``spanpoint[guard]``), shared by the guard's cost budget and the cost attributes of model-call
spans, so the two can never disagree.

Nothing here imports LangChain or the rest of spanpoint. A flat-priced model's per-token rates
are taken once per process (a library calculation is costly next to a multiplication); a model
with tiered prices is priced call by call. An unknown model, or no library installed, is
``None``: never a guessed price.
"""

from __future__ import annotations

import importlib.util
import logging
from functools import lru_cache

logger = logging.getLogger("spanpoint")

#: LangChain's ``model_provider`` names -> genai-prices provider ids, where they differ.
PROVIDER_IDS = {
    "google_genai": "google",
    "google_vertexai": "google",
    "bedrock": "aws",
    "bedrock_converse": "aws",
    "azure_openai": "azure",
    "mistralai": "mistral",
}


def price(model: str, provider: str | None, inp: int, out: int, cached: int) -> float | None:
    """US dollars for one call of ``model`` (``inp`` input tokens of which ``cached`` were
    cache reads, ``out`` output tokens), or None when the model is not in the table."""
    if not model or not library_available():
        return None
    provider = PROVIDER_IDS.get(provider or "", provider)
    rates = _flat_rates(model, provider)
    if rates is None:
        return None
    if rates == "tiered":  # the price depends on the prompt size: price this exact call
        return _library_price(model, provider, inp, out, cached)
    fresh = max(inp - cached, 0)
    return fresh * rates[0] + out * rates[1] + cached * rates[2]


@lru_cache(maxsize=1)
def library_available() -> bool:
    """Whether ``genai-prices`` is installed."""
    return importlib.util.find_spec("genai_prices") is not None


def _library_price(model: str, provider: str | None, inp: int, out: int, cached: int) -> float:
    from genai_prices import Usage, calc_price  # for import time: only priced calls load it

    usage = Usage(input_tokens=inp, output_tokens=out, cache_read_tokens=cached)
    return float(calc_price(usage, model, provider_id=provider).total_price)


@lru_cache(maxsize=256)
def _flat_rates(model: str, provider: str | None) -> tuple[float, float, float] | str | None:
    """Dollars per input, output and cached-input token, ``"tiered"``, or None (unknown)."""
    from datetime import UTC, datetime

    from genai_prices import data_snapshot, types  # for import time (see _library_price)

    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, provider, None)
    except LookupError:
        logger.debug("spanpoint: no price known for model %r (provider %r)", model, provider)
        return None
    prices = info.get_prices(datetime.now(UTC))
    if any(isinstance(v, types.TieredPrices) for v in vars(prices).values()):
        return "tiered"
    million = 1_000_000
    return (
        _library_price(model, provider, million, 0, 0) / million,
        _library_price(model, provider, 0, million, 0) / million,
        _library_price(model, provider, million, 0, million) / million,
    )
