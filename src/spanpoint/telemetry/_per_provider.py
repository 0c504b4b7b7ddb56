"""One value per telemetry provider: built on first use, dropped with the provider."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerProvider(Generic[T]):
    """``per_provider(provider)`` returns the value ``build(provider)`` made for it.

    Instruments and loggers are built once per meter or logger provider (the SDK builds a new
    one on every ``get_meter``/``get_logger`` call); a provider that takes no weak reference
    gets a fresh value each time rather than one that outlives it.
    """

    def __init__(self, build: Callable[[Any], T]) -> None:
        self._build = build
        self._values: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, provider: Any) -> T:
        found = self._values.get(provider)
        if found is None:
            with self._lock:
                found = self._values.get(provider)
                if found is None:
                    found = self._build(provider)
                    with contextlib.suppress(TypeError):
                        self._values[provider] = found
        return found
