"""Test cassettes: record an agent's model and tool calls once, replay them anywhere.

>>> with spanpoint.cassette("tests/cassettes/refund.json"):     # doctest: +SKIP
...     result = agent.invoke({"messages": [("user", "Refund ticket 42")]})

A cassette is a durable run whose checkpoint store is a file. Opening one installs the call
seams (``spanpoint.calls.seams``), so every chat-model and tool call of the block is a
boundary with no other set-up: a plain ``create_agent`` agent, a custom node that calls a
model, a sub-agent. Each call is looked up in the cassette by its checkpoint key and
replayed from it: no model is called, no tool runs. The key is the one spanpoint always
computes (content fingerprint and position) under a fixed run id, so it never depends on a
run id, a process or the wall clock. A tool whose policy is ``always_execute`` is no
boundary and runs as it always does.

Modes (as in vcrpy and pytest-recording):

- ``once`` (default): record when the file is absent; otherwise replay only;
- ``none``: replay only (a missing or empty file is an error too);
- ``new_episodes``: replay what is recorded, execute and record what is new;
- ``all``: execute every call; the file keeps the recorded calls this session did not make
  again and takes the new answers of those it did;
- ``rewrite``: execute every call; the file holds exactly this session's calls.

Replaying only means offline: a call that would reach a model or a tool raises
:class:`~spanpoint.errors.CassetteMissError` before it does, whether it is not in the
cassette, its recorded entry was refused (tampered, corrupt, written by another version),
or it has no boundary to replay (an explicit ``model.stream()``, an input that cannot be
fingerprinted). A miss names the call, the nearest recorded call and what changed.

The file is one JSON document: entries sorted by key, keys sorted, two-space indent, and
nothing that changes from one recording to the next (no trace or span ids, no LangChain
``lc_run--`` ids, no clock values), so recording the same calls with the same answers again
rewrites no line, parallel calls included. It is written to a temp file beside it (created
exclusively, never through a symlink) and renamed over it. Outputs are LangGraph's own
serialized form spelled out as JSON, read back through spanpoint's allow list
(:func:`spanpoint.serde.loads`). Everything written is redacted by the capture policy's key
rule and text patterns, so a credential never reaches a file committed to git; an output
that redaction had to change cannot replay exactly, and the calls after it miss loudly.
docs/cassettes.md has the options (``match_on``, ``before_record``, ``strict``,
``allow_playback_repeats``) and the pytest plugin.

Inside the package, one way: ``files`` (the format, reading and writing) ← ``requests`` (what
a call asked for, and what a miss says) ← ``session`` (the store, the callbacks, the offline
rule) ← here (:class:`cassette`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Collection
from contextvars import Token
from pathlib import Path
from typing import Any

from spanpoint.calls import seams
from spanpoint.capture import CapturePolicy
from spanpoint.cassettes.files import (
    CALL_KINDS,
    CASSETTE_RUN_ID,
    FORMAT_VERSION,
    BeforeRecord,
    CassetteError,
    Entry,
    decode_output,
    encode_output,
    entry_json,
    read_calls,
    read_entries,
    write_entries,
    write_text_safely,
)
from spanpoint.cassettes.requests import (
    MATCH_FIELDS,
    MODES,
    CassetteMode,
    State,
    describe_messages,
    request_changes,
    request_likeness,
    short_value,
)
from spanpoint.cassettes.session import ACTIVE, CassetteStore, Handler, guard_warnings
from spanpoint.config import settings
from spanpoint.errors import ConfigurationError
from spanpoint.run import current_run, run

__all__ = [
    "CALL_KINDS",
    "CASSETTE_RUN_ID",
    "FORMAT_VERSION",
    "MATCH_FIELDS",
    "MODES",
    "BeforeRecord",
    "CassetteError",
    "CassetteMode",
    "CassetteStore",
    "cassette",
    "decode_output",
    "describe_messages",
    "encode_output",
    "entry_json",
    "read_calls",
    "request_changes",
    "request_likeness",
    "short_value",
    "write_text_safely",
]

logger = logging.getLogger("spanpoint")


class cassette:
    """Record the model and tool calls of the block once, replay them on every later run.

    Args:
        path: the cassette file (created on record; ``.json`` by convention).
        mode: ``"once"`` (default), ``"none"``, ``"new_episodes"``, ``"all"`` or
            ``"rewrite"`` (see the module docstring).
        capture: the redaction policy for the file (default: ``configure``'s).
        match_on: what a model call must share with a recorded one to replay it when its
            key differs, from :data:`MATCH_FIELDS` (``("messages", "tools")`` ignores the
            system prompt, the model name and its settings). Default: the key alone.
        before_record: called with each new entry (a JSON dict: ``kind``, ``path``,
            ``request``, ``output``…) before it is written; returns the entry to write, or
            None to leave the call out of the cassette.
        allow_playback_repeats: whether a recorded call may replay more than once in one
            session (a resumed interrupt replays the calls before it).
        strict: when the block ends without an error, raise :class:`CassetteError` if a
            recorded call was never played (see :attr:`unplayed`).

    Usable with ``with`` and ``async with``. The block is a durable run (``run_id``
    ``spanpoint.cassette``) whose store is the cassette: do not open ``spanpoint.run``
    inside it. :attr:`recorded` and :attr:`replayed` count the calls afterwards.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        mode: CassetteMode = "once",
        capture: CapturePolicy | None = None,
        match_on: Collection[str] | None = None,
        before_record: BeforeRecord | None = None,
        allow_playback_repeats: bool = True,
        strict: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ConfigurationError(
                f"cassette mode must be one of {', '.join(MODES)}, not {mode!r}"
            )
        if not isinstance(path, str | Path) or not str(path):
            raise ConfigurationError(f"cassette path must be a file path, not {path!r}")
        if match_on is not None:
            fields = [] if isinstance(match_on, str) else list(match_on)
            unknown = (
                [match_on] if isinstance(match_on, str) else sorted(set(fields) - set(MATCH_FIELDS))
            )
            if unknown:
                raise ConfigurationError(
                    f"match_on takes a collection of {', '.join(MATCH_FIELDS)}, not {unknown!r}"
                )
        if before_record is not None and not callable(before_record):
            raise ConfigurationError(f"before_record must be callable, not {before_record!r}")
        self.path = Path(path)
        self.mode: CassetteMode = mode
        self.match_on = frozenset(match_on) if match_on is not None else None
        self.before_record = before_record
        self.allow_playback_repeats = bool(allow_playback_repeats)
        self.strict = bool(strict)
        self._capture = capture
        self._state: State | None = None
        self._store: CassetteStore | None = None
        self._run: run | None = None
        self._token: Token[Handler | None] | None = None
        self._kept: list[Entry] = []
        self.recorded = 0
        self.replayed = 0

    def __repr__(self) -> str:
        return f"spanpoint.cassette({str(self.path)!r}, mode={self.mode!r})"

    @property
    def recording(self) -> bool:
        """Whether calls that are not in the cassette execute and are recorded."""
        return self._state is not None and not self._state.replay_only

    @property
    def unplayed(self) -> list[str]:
        """``#n kind path`` of each recorded call this session did not replay (nor a call
        enclosing it), in file order."""
        state = self._state
        if state is None:
            return []
        # A call made inside a replayed call (a sub-agent inside its tool) replays with it.
        played = tuple(e.checkpoint.path + "/" for k, e in state.loaded.items() if state.played[k])
        return [
            f"#{i} {e.checkpoint.kind} {e.checkpoint.path!r}"
            for i, (key, e) in enumerate(state.loaded.items(), start=1)
            if state.played[key] == 0 and not e.checkpoint.path.startswith(played)
        ]

    @property
    def all_played(self) -> bool:
        """Whether every recorded call replayed at least once (vcrpy's ``all_played``)."""
        return not self.unplayed

    def __enter__(self) -> cassette:
        if current_run() is not None:
            raise ConfigurationError(
                f"{self!r} was opened inside run {current_run().run_id!r}; a cassette is a "  # type: ignore[union-attr]
                "run of its own: open the cassette outside spanpoint.run"
            )
        exists = self.path.exists()
        if self.mode == "none" and not exists:
            raise CassetteError(
                f"no cassette at {str(self.path)!r} and mode 'none' replays only; record it "
                "once with mode='once' (pytest: --spanpoint-record=once)"
            )
        replay_only = self.mode == "none" or (self.mode == "once" and exists)
        capture = self._capture or settings().capture
        state = State(
            self.path,
            self.mode,
            replay_only,
            capture,
            match_on=self.match_on,
            allow_playback_repeats=self.allow_playback_repeats,
        )
        store = CassetteStore(state)
        entries = read_entries(self.path) if exists and self.mode != "rewrite" else []
        if self.mode == "all":
            self._kept = entries  # written again unless this session records them anew
        else:
            for entry in entries:
                state.loaded[entry.checkpoint.key] = entry
                store.put(entry.checkpoint)
        if replay_only and not state.loaded:
            raise CassetteError(
                f"cassette {str(self.path)!r} holds no calls and mode {self.mode!r} replays "
                "only: nothing could replay. Delete it and record again (mode='rewrite')"
            )
        self._state, self._store = state, store
        seams.install(self, trace_calls=False)
        self._token = ACTIVE.set(Handler(state))
        self._run = run(CASSETTE_RUN_ID, name=f"cassette {self.path.name}", store=store)
        try:
            self._run.__enter__()
        except BaseException:
            ACTIVE.reset(self._token)
            seams.uninstall(self)
            raise
        assert self._run.scope is not None
        guard_warnings(self._run.scope, state)
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        # The block's exception is the run's: its exit decides, then the cassette is written.
        assert self._run is not None and self._state is not None and self._store is not None
        try:
            suppress = self._run.__exit__(*exc_info)
        finally:
            if self._token is not None:
                ACTIVE.reset(self._token)
                self._token = None
            seams.uninstall(self)
        state, store = self._state, self._store
        journal = store.list_journal(CASSETTE_RUN_ID)
        self.replayed = sum(1 for j in journal if j.status == "replayed")
        new = [
            cp
            for cp in store.list_checkpoints(CASSETTE_RUN_ID)
            if cp.key not in state.loaded and cp.kind in CALL_KINDS
        ]
        self.recorded = len(new)
        failed = exc_info[0] is not None and not suppress
        if not state.replay_only:
            if not new and not state.loaded and not failed:
                message = (
                    f"cassette {str(self.path)!r} recorded no model or tool call: nothing in "
                    "the block called a chat model or a tool through LangChain (a call made "
                    "with the provider's own SDK is not seen)"
                )
                logger.warning("spanpoint: %s", message)
                warnings.warn(message, UserWarning, stacklevel=2)
            recorded = {cp.key for cp in new}
            entries = [e for e in self._kept if e.checkpoint.key not in recorded]
            entries += list(state.loaded.values())
            entries += [Entry(cp, state.requests.get(cp.key)) for cp in new]
            if new or (self.mode in ("all", "rewrite") and entries):
                write_entries(self.path, entries, state.capture, self.before_record)
        elif self.strict and not failed and self.unplayed:
            unplayed = self.unplayed
            raise CassetteError(
                f"cassette {str(self.path)!r} (strict): {len(unplayed)} recorded call(s) were "
                f"never played: {', '.join(unplayed[:5])}. The code under test no longer makes "
                "them; record the cassette again (mode='rewrite') or drop strict=True"
            )
        return suppress

    async def __aenter__(self) -> cassette:
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> bool:
        return self.__exit__(*exc_info)
