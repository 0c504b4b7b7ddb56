"""Local telemetry files (``traces.jsonl``, ``logs.jsonl``, ``metrics.jsonl``), kept private.

Spans, log records and metrics can hold prompts, state and identifiers, so the files are
created ``0600`` in a ``0700`` folder, never through a symlink and never into another user's
file (:mod:`spanpoint._files`). A pre-existing file that others can read is tightened (it is
spanpoint's output); so is spanpoint's own ``.spanpoint`` folder. Any other folder is the
application's, and is left as it is (the files in it are still ``0600``).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Sequence
from pathlib import Path

from spanpoint._files import open_owned, private_folder
from spanpoint.errors import UnsafePathError

logger = logging.getLogger("spanpoint")


class PrivateAppender:
    """Appends lines to one file, created ``0600`` in a ``0700`` folder.

    A symlink, another user's file or folder, or a pipe at the path is refused: the append
    fails (the exporter reports a failed export) and one warning names the path and the fix.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._checked = False
        self._refused = False

    def append(self, lines: Sequence[str]) -> bool:
        """Append ``lines`` (one per line); False when the file cannot be written."""
        try:
            with self._lock:
                if not self._checked:
                    private_folder(self.path.parent)
                fd, info = open_owned(self.path, os.O_WRONLY | os.O_APPEND)
                if not (stat.S_ISREG(info.st_mode) or stat.S_ISCHR(info.st_mode)):
                    os.close(fd)
                    raise UnsafePathError(
                        f"{self.path} is not a regular file (a pipe, a socket or a folder); "
                        f"remove it (rm {self.path}) or set SPANPOINT_TRACE_FILE to a file path"
                    )
                with os.fdopen(fd, "a", encoding="utf-8") as fh:
                    self._checked = True
                    fh.write("\n".join(lines) + "\n")
        except UnsafePathError as exc:
            if not self._refused:  # one warning per file, not one per export
                self._refused = True
                logger.warning("spanpoint: not writing telemetry: %s", exc)
            return False
        except OSError:
            return False
        return True
