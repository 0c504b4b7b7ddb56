"""The one registry of framework class attributes spanpoint replaces at run time.

A :class:`PatchSet` names the attributes one feature wraps (the model and tool seams, the
spans of nested graph calls, a subgraph's task positions) and how each wrapper is made from
the attribute it replaces. A set is applied once, the first time a feature needs it, and
stays: nothing is replaced or restored per call. Applying again is a check that changes
nothing (thread-safe; a wrapper someone removed since is put back).

An applied wrapper decides on every call whether spanpoint is on for it, and outside that it
calls what it replaced with the same arguments. A set is on:

- in the context of an :meth:`PatchSet.enabled` block (a ``GraphRunner`` call; a context
  variable, so a thread or task the call started sees it, and a concurrent call elsewhere
  does not);
- everywhere, while a holder holds it (the zero-code instrumentor, a cassette): :meth:`hold`
  / :meth:`release`.

Wrappers stack: when another library wrapped one of ours after we applied it, ours stays in
the chain under theirs, and applying again finds it there rather than wrapping a second
time.

:func:`patched` lists every attribute the registry has replaced, whichever feature owns it:
the one place a reader (or a test) asks "what did spanpoint patch?".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from types import FunctionType
from typing import Any

#: A wrapper factory: given the attribute found on the class, the attribute to put there.
Factory = Callable[[Any], Any]
#: The attributes of a set, resolved when it is first applied (framework imports are paid
#: then, not when the feature's module is imported): (class, attribute name, factory).
Targets = Callable[[], list[tuple[type, str, Factory]]]

_LOCK = threading.RLock()
_SETS: dict[str, PatchSet] = {}
#: How deep to look for our wrapper under other libraries' wrappers (``__wrapped__``).
_CHAIN_DEPTH = 16


class PatchSet:
    """The class attributes one feature replaces, applied once, on where it is enabled.

    Args:
        name: the feature's name (unique; shown by :func:`patched`).
        targets: returns ``(class, attribute, factory)`` for each attribute to replace.
    """

    __slots__ = ("_enabled", "_held", "_holders", "_installed", "_targets", "name")

    def __init__(self, name: str, targets: Targets) -> None:
        with _LOCK:
            if name in _SETS:
                raise ValueError(f"a patch set named {name!r} is registered already")
            self.name = name
            self._targets = targets
            self._holders: set[object] = set()
            self._held = False
            self._enabled: ContextVar[bool] = ContextVar(f"spanpoint_patches_{name}", default=False)
            #: (class, attribute) -> our wrapper, once applied.
            self._installed: dict[tuple[type, str], Any] = {}
            _SETS[name] = self

    @property
    def live(self) -> bool:
        """Whether the set is on here: held by someone, or enabled in this context."""
        return self._held or self._enabled.get()

    def apply(self) -> None:
        """Put the wrappers in place unless they are (idempotent, thread-safe)."""
        if self._installed and self._in_place():
            return
        with _LOCK:
            if self._installed and self._in_place():
                return
            for owner, attribute, factory in self._targets():
                wrapper = self._installed.get((owner, attribute))
                current = owner.__dict__[attribute]
                if wrapper is not None and _in_chain(current, wrapper):
                    continue  # ours, still in the chain under another library's wrapper
                wrapper = factory(_as_function(current))
                setattr(owner, attribute, wrapper)
                self._installed[(owner, attribute)] = wrapper

    def _in_place(self) -> bool:
        for (owner, attribute), wrapper in self._installed.items():
            current = owner.__dict__.get(attribute)
            if current is not wrapper and not _in_chain(current, wrapper):
                return False
        return True

    def enable(self) -> Token[bool]:
        """Apply the set and turn it on in this context; give the token to :meth:`disable`."""
        self.apply()
        return self._enabled.set(True)

    def disable(self, token: Token[bool]) -> None:
        """Back to what this context had before :meth:`enable` gave ``token``."""
        self._enabled.reset(token)

    @contextmanager
    def enabled(self) -> Iterator[None]:
        """The set on in this context for the duration of a block."""
        token = self.enable()
        try:
            yield
        finally:
            self._enabled.reset(token)

    def held_by(self, holder: object) -> bool:
        """Whether ``holder`` holds this set."""
        return holder in self._holders

    def hold(self, holder: object) -> None:
        """``holder`` needs the set on everywhere until it releases it (idempotent)."""
        with _LOCK:
            self.apply()
            self._holders.add(holder)
            self._held = True

    def release(self, holder: object) -> None:
        """``holder`` is done; the wrappers stay, on where another holder or a context has
        them on, passing every other call through."""
        with _LOCK:
            self._holders.discard(holder)
            self._held = bool(self._holders)


def _as_function(current: Any) -> Any:
    """``current`` as a function called with the instance first, as a wrapper calls it.

    Another library's wrapper found on the class (wrapt's ``FunctionWrapper``, which the
    OpenTelemetry instrumentations put there) is a descriptor: it learns its instance only
    when bound, and called as it is it takes the instance for the first argument. So it is
    bound on each call, and kept reachable as ``__wrapped__``.
    """
    if type(current) is FunctionType or not hasattr(type(current), "__get__"):
        return current

    def bound_call(instance: Any, /, *args: Any, **kwargs: Any) -> Any:
        return current.__get__(instance, type(instance))(*args, **kwargs)

    bound_call.__wrapped__ = current  # type: ignore[attr-defined]
    return bound_call


def _in_chain(current: Any, wrapper: Any) -> bool:
    """Whether ``wrapper`` is ``current`` or under it (wrappers keep ``__wrapped__``)."""
    for _ in range(_CHAIN_DEPTH):
        if current is wrapper:
            return True
        current = getattr(current, "__wrapped__", None)
        if current is None:
            return False
    return False


def patched() -> dict[str, list[tuple[type, str]]]:
    """Every attribute the registry has replaced, by set."""
    with _LOCK:
        return {name: list(s._installed) for name, s in _SETS.items() if s._installed}
