"""Lazy names for a package face (PEP 562): a name's module is imported on its first use.

``spanpoint``, ``spanpoint.graph`` and ``spanpoint.guard`` keep their names importable while
``import spanpoint`` loads neither LangGraph's runtime nor ``langchain.agents``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that returns ``table[name]``'s ``name``, imported on use."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
