"""What a package face needs beyond plain imports.

- Lazy names (PEP 562): a name's module is imported on its first use. ``spanpoint``,
  ``spanpoint.graph`` and ``spanpoint.guard`` keep their names importable while
  ``import spanpoint`` loads neither LangGraph's runtime nor ``langchain.agents``.
- Moved names: a name that left the face still imports for one release, with a
  ``DeprecationWarning`` naming its new home.
- Callable modules: ``spanpoint.run`` and ``spanpoint.step`` are the modules (so
  ``import spanpoint.run as m`` gives the module), and calling one calls its namesake
  (``spanpoint.run("ticket-42")`` is ``spanpoint.run.run("ticket-42")``).
- ``langchain`` is optional (the ``spanpoint[langchain]`` extra, for ``create_agent``
  middleware): a name that needs it, used without it, raises an ``ImportError`` saying so.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(
    package: str, table: Mapping[str, str], moved: Mapping[str, str] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that returns ``table[name]``'s ``name``, imported on use (the
    module itself when ``table[name]`` is the subpackage ``{package}.{name}``), and
    ``moved[name]``'s ``name`` with a ``DeprecationWarning`` (a name that left the face)."""
    moved = moved or {}

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module == f"{package}.{name}":  # a subpackage, imported on first use
            return importlib.import_module(module)
        if module is not None:
            return getattr(_import(module, f"{package}.{name}"), name)
        home = moved.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # ``from spanpoint import X`` looks X up twice (importlib's fromlist check, then the
        # import itself): one warning, at the importer's line.
        if not sys._getframe(1).f_code.co_filename.startswith("<frozen importlib"):
            warnings.warn(
                f"{package}.{name} moved to {home}.{name}; import it from there "
                f"(the old name is removed in the next release)",
                DeprecationWarning,
                stacklevel=2,
            )
        return getattr(_import(home, f"{package}.{name}"), name)

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


def _import(module: str, what: str) -> types.ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == LANGCHAIN or (exc.name or "").startswith(LANGCHAIN + "."):
            raise missing_langchain(what) from exc
        raise


class CallableModule(types.ModuleType):
    """A module that calls its namesake when called: ``spanpoint.run(...)`` is
    ``spanpoint.run.run(...)``, while ``spanpoint.run`` stays the module."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)


def callable_module(module: types.ModuleType) -> types.ModuleType:
    """Make ``module`` a :class:`CallableModule` (in place) and return it."""
    module.__class__ = CallableModule
    return module
