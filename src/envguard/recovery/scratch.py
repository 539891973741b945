"""Scratch folders in $TMPDIR (bisect's venvs and worktrees, export's locks, the wheels
guard reads before an install and the requirements it pins it to), named with
the pid and host of the envguard that made them: a run killed with SIGKILL runs no clean-up,
so each new one first removes the folders whose owner is gone."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

HOST = re.sub(r"[^A-Za-z0-9.]", "_", os.uname().nodename)
# envguard-<kind>-<pid>@<host>-<mkdtemp's random part, which never holds a dash>
_NAME = re.compile(r"^envguard-(?:bisect|bisect-worktree|export|guard)-([0-9]+)@(.+)-[^-]+$")


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # a planted name's pid past a C long
        return False
    except PermissionError:
        return True
    return True


def scratch_folder(kind: str) -> Path:
    """A new folder ``envguard-<kind>-<pid>@<host>-...`` in $TMPDIR, after sweep()."""
    sweep()
    return Path(tempfile.mkdtemp(prefix=f"envguard-{kind}-{os.getpid()}@{HOST}-"))


def sweep() -> None:
    """Remove the scratch folders of envguard runs that are gone: only this user's own real
    folders (no link), made on this host, whose pid no longer runs. A folder named in an
    older form (no pid) is left alone."""
    me, uid = os.getpid(), os.getuid()
    try:
        with os.scandir(tempfile.gettempdir()) as scan:
            entries = list(scan)
    except OSError:
        return
    for entry in entries:
        named = _NAME.match(entry.name)
        if not named or named.group(2) != HOST:
            continue
        pid = int(named.group(1))
        if pid == me or alive(pid):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
            shutil.rmtree(entry.path, ignore_errors=True)
