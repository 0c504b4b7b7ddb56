"""Files spanpoint writes, opened so that nobody else's symlink or file is written through.

Everything spanpoint creates on disk (``.spanpoint/``, the local trace, log and metric files,
the SQLite store and its ``-wal``/``-shm`` files, cassettes) goes through here:

* the last path component is never a symlink followed (``O_NOFOLLOW``): a symlink planted in
  a shared folder would make spanpoint append to, chmod or create the attacker's target;
* a new file is created with ``O_EXCL``, ``0600``; an existing regular file must belong to the
  current user and have no other hard link, so spanpoint never writes a file it was handed;
* spanpoint's own folder (``.spanpoint``) must be a real folder owned by the current user;
  it is created ``0700`` and tightened when others can read it. Any other folder is the
  application's and is left as it is.

A refusal is an :class:`~spanpoint.errors.UnsafePathError` naming the path and the fix.
Checks are made on the opened descriptor (``fstat``), never on a path looked up again. The
files SQLite holds open are checked through an ``O_PATH`` descriptor (:func:`stat_owned`):
closing an ordinary one would drop SQLite's locks in this process.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from pathlib import Path

from spanpoint.errors import UnsafePathError

logger = logging.getLogger("spanpoint")

#: The folder name spanpoint creates by default; only this one is checked and tightened.
OWN_FOLDER = ".spanpoint"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a planted FIFO must not hang the open
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_PATH = getattr(os, "O_PATH", 0)  # a descriptor that only names a file (Linux)
#: errnos that mean "this place cannot be written by this user", not "something is wrong".
_READ_ONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _me() -> int | None:
    geteuid = getattr(os, "geteuid", None)
    return geteuid() if geteuid is not None else None


def _owner_name(uid: int) -> str:
    try:
        import pwd  # for import time: POSIX only, and needed only to word a refusal

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _refuse_link(path: Path, what: str) -> UnsafePathError:
    return UnsafePathError(
        f"{path} is a symlink; spanpoint does not write {what} through a symlink (another "
        f"user could plant one to redirect the write). Remove it (rm {path}) or point "
        "spanpoint at the real path"
    )


def _check_owner(path: Path, info: os.stat_result, what: str) -> None:
    me = _me()
    if me is not None and info.st_uid != me:
        raise UnsafePathError(
            f"{path} belongs to {_owner_name(info.st_uid)}, not to the current user "
            f"({_owner_name(me)}); spanpoint keeps {what} only in a {what} of its own. "
            f"Remove or move it (rm -r {path}), or point spanpoint at a path you own"
        )


def _check_regular(path: Path, info: os.stat_result) -> None:
    _check_owner(path, info, "file")
    if info.st_nlink != 1:
        raise UnsafePathError(
            f"{path} has {info.st_nlink} hard links; spanpoint does not write a file that is "
            f"also another path. Remove it (rm {path}) and run again"
        )


def private_folder(folder: Path) -> None:
    """Create ``folder`` ``0700`` if absent (its parents as the application's); when it is
    spanpoint's own (``.spanpoint``), refuse a symlink or another user's folder and tighten
    one that others can read."""
    folder = Path(folder)
    created = False
    if not os.path.lexists(folder):
        # mkdir's mode applies to the last component only; parents are the application's.
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir(mode=0o700)
            created = True
        except FileExistsError:  # another thread or process made it meanwhile: checked below
            pass
    if folder.name != OWN_FOLDER and not created:
        return
    try:
        fd = os.open(folder, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        if os.path.islink(folder):
            raise _refuse_link(folder, "a folder") from None
        if os.path.lexists(folder) and not os.path.isdir(folder):
            raise UnsafePathError(
                f"{folder} is not a folder; remove it (rm {folder}) so spanpoint can create "
                "its folder there, or point spanpoint at another path"
            ) from exc
        raise
    try:
        info = os.fstat(fd)
        _check_owner(folder, info, "folder")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            try:
                os.fchmod(fd, mode & 0o700)
            except OSError as exc:
                logger.warning(
                    "spanpoint: %s is readable by other users (mode %o) and could not be "
                    "tightened (%s); run: chmod 700 %s",
                    folder,
                    mode,
                    exc,
                    folder,
                )
    finally:
        os.close(fd)


def open_owned(path: Path, flags: int, *, create: bool = True) -> tuple[int, os.stat_result]:
    """Open ``path`` (``flags``: ``os.O_WRONLY | os.O_APPEND``, ``os.O_RDWR``, ...) without
    following a symlink; create it ``0600`` with ``O_EXCL`` when absent and ``create``.

    A regular file must belong to the current user and have one link, else
    :class:`UnsafePathError`; it is tightened to ``0600`` when others can read it. Any other
    kind (a device such as ``/dev/null``) is returned as is: the caller decides. Returns the
    descriptor, which the caller closes, and its ``fstat``."""
    path = Path(path)
    base = flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK
    fd: int | None = None
    if create:
        try:
            fd = os.open(path, base | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno not in _READ_ONLY:
                raise
    try:
        if fd is None:
            fd = os.open(path, base)
    except OSError as exc:
        if os.path.islink(path):
            raise _refuse_link(path, "a file") from None
        if exc.errno not in _READ_ONLY or flags & (os.O_WRONLY | os.O_RDWR) == 0:
            raise
        # Read-only (its file system, or its mode): checked as it is, for a reader to fail
        # or succeed on its own terms.
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | _NONBLOCK)
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            _check_regular(path, info)
            tighten(fd, path, info)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def stat_owned(path: Path) -> os.stat_result | None:
    """The status of the file at ``path`` (None when there is none), checked and tightened as
    :func:`open_owned` does, without opening the file for reading or writing.

    For the files SQLite holds open (a database, its ``-wal`` and ``-shm``): closing *any*
    descriptor of a file drops every POSIX lock this process holds on it, SQLite's included,
    and another process could then reset the WAL under a live connection. An ``O_PATH``
    descriptor (Linux) holds no lock and drops none; elsewhere the check is an ``lstat``.
    Returns the status from before any tightening."""
    path = Path(path)
    try:
        fd = os.open(path, _PATH | _NOFOLLOW | _CLOEXEC) if _PATH else None
        info = os.fstat(fd) if fd is not None else os.lstat(path)
    except FileNotFoundError:
        return None
    try:
        if stat.S_ISLNK(info.st_mode):
            raise _refuse_link(path, "a file")
        if stat.S_ISREG(info.st_mode):
            _check_regular(path, info)
            mode = stat.S_IMODE(info.st_mode)
            if mode & 0o077:
                # Through the descriptor where there is one: the path may have changed since.
                where = f"/proc/self/fd/{fd}" if fd is not None else path
                try:
                    os.chmod(where, 0o600)
                except OSError as exc:
                    logger.warning(
                        "spanpoint: %s is readable by other users (mode %o) and could not be "
                        "tightened (%s); run: chmod 600 %s",
                        path,
                        mode,
                        exc,
                        path,
                    )
    finally:
        if fd is not None:
            os.close(fd)
    return info


def claim(path: Path) -> os.stat_result | None:
    """Create ``path`` empty and ``0600`` with ``O_EXCL`` unless something is there, then
    check it (:func:`stat_owned`). Claims a file another program (SQLite) opens by name, so
    that no symlink can be planted there first. None only in a read-only place where there
    is no such file."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno not in _READ_ONLY:
            raise
    return stat_owned(path)


def claim_regular(path: Path) -> None:
    """:func:`claim` a file that must be a regular file (SQLite's ``-wal``/``-shm``)."""
    info = claim(path)
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise UnsafePathError(
            f"{path} is not a regular file (a device, a pipe or a folder); remove it "
            f"(rm {path}) and run again"
        )


def tighten(fd: int, path: Path, info: os.stat_result) -> bool:
    """Make a regular file that group or others can read ``0600``; warn when it cannot be.
    True when the mode was changed."""
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISREG(info.st_mode) or not mode & 0o077:
        # A device (/dev/null): tightening it as root would lock every other user out of it.
        return False
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
        return False
    return True


def replace_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` all at once: into ``<path>.tmp`` beside it (created ``0600``
    with ``O_EXCL|O_NOFOLLOW``, flushed to disk), then renamed over ``path``.

    A symlink, another user's file or a hard-linked file at ``path`` or at the temp path is
    refused (:class:`UnsafePathError`) and left as it is; a temp file of the current user's,
    left by a write that was interrupted, is replaced. Readers see the old file or the new,
    never a part."""
    path = Path(path)
    if os.path.lexists(path):
        claim_regular(path)
    temp = path.with_name(path.name + ".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    try:
        fd = os.open(temp, flags, 0o600)
    except FileExistsError:
        claim_regular(temp)  # refuses a symlink or someone else's file
        os.unlink(temp)
        fd = os.open(temp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
