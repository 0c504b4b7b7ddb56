"""Lazy names for a package face (PEP 562): a name's module is imported on its first use.

``spanpoint``, ``spanpoint.graph`` and ``spanpoint.guard`` keep their names importable while
``import spanpoint`` loads neither LangGraph's runtime nor ``langchain.agents``.

``langchain`` is optional (the ``spanpoint[langchain]`` extra, for ``create_agent``
middleware): a name that needs it, used without it, raises an ``ImportError`` saying so.
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
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == LANGCHAIN or (exc.name or "").startswith(LANGCHAIN + "."):
                raise missing_langchain(f"{package}.{name}") from exc
            raise
        return getattr(found, name)

    return __getattr__


#: The one optional upstream package (``langchain-core`` is required, ``langchain`` is not).
LANGCHAIN = "langchain"


def missing_langchain(what: str) -> ImportError:
    """The error for ``what`` used without ``langchain`` installed: it names the extra."""
    return ImportError(
        f"{what} needs LangChain's agents (the `langchain` package), which is not installed: "
        "install spanpoint with its langchain extra, `pip install 'spanpoint[langchain]'`. "
        "Graphs, GraphRunner and the model and tool seams need langchain-core only.",
        name=LANGCHAIN,
    )
