"""Envguard's own folders: a venv's history (``.venv.envguard-history``), the snapshot
folder and its content store, a rebuild's build and plan folders. Opened, never followed.

Each of them sits where someone else may have put something first: a checkout can commit
``snapshots`` or ``snapshots/.store`` as a symlink, and a venv's parent folder is often
shared. A link there (to a folder outside, or dangling), a plain file, or a folder of
another user's would have envguard write its records, snapshots or kept files through it,
or read records a stranger wrote. So each folder is opened the way bisect opens its log
folder: relative to its parent's descriptor, with ``O_NOFOLLOW | O_DIRECTORY``, made with
``mkdir`` (which never follows a link either) when it is absent and should exist.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from envguard.errors import UsageError

_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_HINT = "envguard keeps its own folders itself: move this one away and run the command again"


def own_folder(path: Path, *, create: bool) -> Path | None:
    """``path`` once it is a real folder of this user's (made when ``create`` and absent;
    None when absent and not ``create``). UsageError ``<path>: <what>`` for a symlink
    (to anywhere, dangling too), anything not a folder, or another user's folder."""
    path = path.absolute()
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)  # the user's place: theirs to link
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except NotADirectoryError:
        raise UsageError(f"{path.parent}: not a folder") from None
    try:
        if create:  # whatever is there already is judged by the open below
            with contextlib.suppress(FileExistsError):
                os.mkdir(path.name, 0o755, dir_fd=parent)
        try:
            fd = os.open(path.name, _FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise UsageError(f"{path}: cannot open ({exc.strerror or exc})") from None
            raise UsageError(f"{path}: {_what(path.name, parent)}", hint=_HINT) from None
        try:
            owner = os.fstat(fd).st_uid
        finally:
            os.close(fd)
    finally:
        os.close(parent)
    if owner not in (os.geteuid(), 0):
        raise UsageError(f"{path}: a folder of another user's (uid {owner})", hint=_HINT)
    return path


def _what(name: str, parent: int) -> str:
    """What is at ``name`` instead of a folder, in words."""
    try:
        mode = os.lstat(name, dir_fd=parent).st_mode
    except OSError:
        return "not a folder"
    if stat.S_ISLNK(mode):
        try:
            target = os.readlink(name, dir_fd=parent)
        except OSError:
            target = "?"
        shown = "".join(c if c.isprintable() else "?" for c in target)[:200]
        try:
            os.stat(name, dir_fd=parent)
        except OSError:
            return f"a dangling symbolic link (to {shown}); envguard never follows its own folders"
        return f"a symbolic link (to {shown}); envguard never follows its own folders"
    if stat.S_ISREG(mode):
        return "a file, not a folder"
    return "not a folder (a socket, pipe or device)"


def fresh_place(path: Path) -> Path:
    """``path`` when nothing is there, not even a dangling link: where envguard is about to
    make a folder of its own by name (a build folder, a backup). UsageError otherwise."""
    if os.path.lexists(path):
        what = "a symbolic link" if path.is_symlink() else "something"
        raise UsageError(f"{path}: {what} is already there, where envguard makes its own folder")
    return path
