"""The one registry of framework class attributes spanpoint replaces at run time.

A :class:`PatchSet` names the attributes one feature wraps (the model and tool seams, the
spans of nested graph calls) and how each wrapper is made from the attribute it replaces.
Holders take a set and give it back: the first holder in installs every wrapper, later ones
only join, the last one out restores what was there. Taking a set twice with one holder
changes nothing, and neither does giving it back twice.

Wrappers stack: when another library wrapped one of ours after we installed it, the last
holder out leaves ours in place (removing it would remove theirs too). The set is not live
then, so its wrappers pass calls straight through (each checks :attr:`PatchSet.live` or a
scope of its own), and the next holder in uses the wrapper still in the chain rather than
wrapping a second time.

:func:`patched` lists every attribute the registry holds replaced right now, whichever
feature owns it: the one place a reader (or a test) asks "what did spanpoint patch?".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: A wrapper factory: given the attribute found on the class, the attribute to put there.
Factory = Callable[[Any], Any]
#: The attributes of a set, resolved when it is first installed (framework imports are
#: paid then, not when the feature's module is imported): (class, attribute name, factory).
Targets = Callable[[], list[tuple[type, str, Factory]]]

_LOCK = threading.RLock()
_SETS: dict[str, PatchSet] = {}


class PatchSet:
    """The class attributes one feature replaces, held by whoever needs them live.

    Args:
        name: the feature's name (unique; shown by :func:`patched`).
        targets: returns ``(class, attribute, factory)`` for each attribute to replace.
    """

    __slots__ = ("_holders", "_installed", "_targets", "name")

    def __init__(self, name: str, targets: Targets) -> None:
        with _LOCK:
            if name in _SETS:
                raise ValueError(f"a patch set named {name!r} is registered already")
            self.name = name
            self._targets = targets
            self._holders: set[object] = set()
            #: (class, attribute) -> (what was there, our wrapper), while live.
            self._installed: dict[tuple[type, str], tuple[Any, Any]] = {}
            _SETS[name] = self

    @property
    def live(self) -> bool:
        """Whether the set is held (its wrappers are then installed)."""
        return bool(self._holders)

    def held_by(self, holder: object) -> bool:
        """Whether ``holder`` holds this set."""
        return holder in self._holders

    def hold(self, holder: object) -> None:
        """``holder`` needs the wrappers live: install them unless they are already."""
        with _LOCK:
            joined = bool(self._holders)
            self._holders.add(holder)
            if joined:
                return
            for owner, attribute, factory in self._targets():
                if (owner, attribute) in self._installed:
                    continue  # ours, still in the chain under another library's wrapper
                current = owner.__dict__[attribute]
                wrapper = factory(current)
                setattr(owner, attribute, wrapper)
                self._installed[(owner, attribute)] = (current, wrapper)

    def release(self, holder: object) -> None:
        """``holder`` is done; the last holder out restores the originals (a wrapper that
        another library wrapped since stays, passing every call through)."""
        with _LOCK:
            self._holders.discard(holder)
            if self._holders or not self._installed:
                return
            for (owner, attribute), (original, wrapper) in list(self._installed.items()):
                if owner.__dict__.get(attribute) is wrapper:
                    setattr(owner, attribute, original)
                    del self._installed[(owner, attribute)]

    @contextmanager
    def held(self) -> Iterator[None]:
        """The wrappers live for the duration of a block, under a holder token of its own
        (a concurrent block that installed them may end first and must not remove them)."""
        token = object()
        self.hold(token)
        try:
            yield
        finally:
            self.release(token)


def patched() -> dict[str, list[tuple[type, str]]]:
    """Every attribute the registry has replaced now (live or passing through), by set."""
    with _LOCK:
        return {name: list(s._installed) for name, s in _SETS.items() if s._installed}
