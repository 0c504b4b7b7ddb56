"""Checkpoint stores: one protocol, three implementations (memory, SQLite, PostgreSQL).

``open_store`` turns a store address into a store:

- ``memory`` — :class:`MemoryStore`, nothing survives the process;
- ``sqlite:///abs/path.db``, ``sqlite:rel/path.db`` or a plain file path — :class:`SqliteStore`;
- ``postgresql://user@host/db`` — ``PostgresStore`` (install ``spanpoint[postgres]``).

With no address, ``$SPANPOINT_STORE`` decides, else ``.spanpoint/checkpoints.db``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from spanpoint.errors import ConfigurationError
from spanpoint.stores.base import (
    BoundaryRecord,
    Checkpoint,
    CheckpointStore,
    Claim,
    RunRecord,
    WaitRecord,
)
from spanpoint.stores.memory import MemoryStore
from spanpoint.stores.sqlite import SqliteStore

if TYPE_CHECKING:
    from pathlib import Path

DEFAULT_SQLITE_PATH = ".spanpoint/checkpoints.db"
STORE_ENV = "SPANPOINT_STORE"

__all__ = [
    "DEFAULT_SQLITE_PATH",
    "BoundaryRecord",
    "Checkpoint",
    "CheckpointStore",
    "Claim",
    "MemoryStore",
    "RunRecord",
    "SqliteStore",
    "WaitRecord",
    "open_store",
]


def open_store(address: str | Path | None = None) -> CheckpointStore:
    """Open the store named by ``address`` (see the module docstring)."""
    if address is None:
        address = os.environ.get(STORE_ENV) or DEFAULT_SQLITE_PATH
    text = str(address).strip()
    if not text:
        raise ConfigurationError(
            f"an empty store address; set {STORE_ENV} to 'memory', a SQLite file path or a "
            "postgresql:// URL"
        )
    if text in ("memory", "memory://", ":memory:"):
        return MemoryStore()
    if text.startswith(("postgresql://", "postgres://")):
        try:
            # For import time, and so SQLite users need no psycopg: only a postgres address.
            from spanpoint.stores.postgres import PostgresStore
        except ImportError as exc:
            raise ConfigurationError(
                f"the store {_redact(text)} needs PostgreSQL support: pip install "
                f"'spanpoint[postgres]' ({exc})"
            ) from exc
        return PostgresStore(text)
    if text.startswith("sqlite://"):
        text = text.removeprefix("sqlite://")
    elif text.startswith("sqlite:"):
        text = text.removeprefix("sqlite:")
    elif "://" in text:
        raise ConfigurationError(
            f"unknown store address scheme in {_redact(text)!r}; use 'memory', a SQLite path "
            "(or sqlite:///path) or a postgresql:// URL"
        )
    return SqliteStore(text)


def _redact(url: str) -> str:
    """Drop a password from a URL before it goes into an error message."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        creds, _, host = rest.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{scheme}{sep}{user}:***@{host}"
    return url
