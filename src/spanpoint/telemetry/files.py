"""Local telemetry files (``traces.jsonl``, ``logs.jsonl``, ``metrics.jsonl``), kept private.

Spans, log records and metrics can hold prompts, state and identifiers, so the files are
created ``0600`` in a ``0700`` folder. A pre-existing file that others can read is tightened
(it is spanpoint's output); so is spanpoint's own ``.spanpoint`` folder. Any other folder is
the application's, and is left as it is (the files in it are still ``0600``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger("spanpoint")

#: The folder name spanpoint creates by default; only this one is tightened when it exists.
OWN_FOLDER = ".spanpoint"


class PrivateAppender:
    """Appends lines to one file, created ``0600`` in a ``0700`` folder."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._checked = False

    def append(self, lines: Sequence[str]) -> bool:
        """Append ``lines`` (one per line); False when the file cannot be written."""
        try:
            with self._lock:
                if not self._checked:
                    ensure_private_folder(self.path.parent)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    if not self._checked:
                        _tighten(fh.fileno(), self.path)
                        self._checked = True
                    fh.write("\n".join(lines) + "\n")
        except OSError:
            return False
        return True


def ensure_private_folder(folder: Path) -> None:
    """Create ``folder`` ``0700``; tighten it when it is spanpoint's own and others can read it."""
    if not folder.exists():
        # mkdir's mode applies to the last component only; parents are the application's.
        folder.parent.mkdir(parents=True, exist_ok=True)
        # Another thread or process may create it meanwhile: it is checked below.
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    if folder.name != OWN_FOLDER:
        return
    mode = stat.S_IMODE(folder.stat().st_mode)
    if mode & 0o077:
        try:
            os.chmod(folder, mode & 0o700)
        except OSError as exc:
            logger.warning(
                "spanpoint: %s is readable by other users (mode %o) and could not be "
                "tightened (%s); run: chmod 700 %s",
                folder,
                mode,
                exc,
                folder,
            )


def _tighten(fd: int, path: Path) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        # /dev/null, a FIFO, a terminal: not a file of spanpoint's. Tightening a device node
        # as root would lock every other user of the machine out of it.
        return
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        try:
            os.fchmod(fd, 0o600)
        except OSError as exc:
            logger.warning(
                "spanpoint: %s is readable by other users (mode %o) and could not be "
                "tightened (%s); run: chmod 600 %s",
                path,
                mode,
                exc,
                path,
            )
