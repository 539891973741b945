"""Compile caches and tracked files: sizes, counts and hashes, never following symlinks."""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import os
import time

from .confine import OUTSIDE
from .reading import escaped_name, named_by, open_regular
from .system import user

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

    from .confine import Roots


# A compile cache is a few GB in at most a few hundred thousand files. Past these a walk is
# not measuring a cache (a snapshot may name "/"): it stops and says so.
WALK_SECONDS = 20.0
WALK_FILES = 2000000
# Tracked files are model scripts and configs: all of them hash in well under a second. A
# snapshot naming a 100 GB checkpoint (or many) stops here, with the files left unhashed.
HASH_SECONDS = 60.0
# Pseudo file systems: nothing there is a cache, and reading them can block or never end.
_NEVER = ("/proc", "/sys", "/dev")
# Each folder is opened (never through a symlink) and its entries stat'ed relative to it:
# no path is built or resolved per file (15% of the walk), and a folder swapped for a
# symlink while the walk runs is not followed. Path by path where scandir takes no fd.
_BY_FD = os.scandir in os.supports_fd and hasattr(os, "O_DIRECTORY")
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


def walk_tree(
    root: str,
    warnings: Optional[List[str]] = None,
    seconds: float = WALK_SECONDS,
    max_files: int = WALK_FILES,
) -> Dict[str, Any]:
    """Size, file count and newest mtime of a directory tree, never following symlinks;
    within ``seconds`` and ``max_files`` (a warning says when a walk was cut short)."""
    result = not_walked(root)
    # The root itself may be a symlink to scratch space: one hop cannot loop.
    start = os.path.realpath(root)
    if start == "/" or any(start == p or start.startswith(p + "/") for p in _NEVER):
        if warnings is not None:
            warnings.append("%s: not walked (the root or a pseudo file system)" % root)
        return result
    result["readable"] = True
    if not os.path.isdir(start):
        result["exists"] = os.path.lexists(root)
        return result
    result["exists"] = True
    total = count = 0
    newest = 0.0
    unreadable = 0
    stack = [start]
    deadline = time.monotonic() + seconds
    cut = False
    while stack and not cut:
        if time.monotonic() > deadline:  # also for a tree of empty folders
            cut = True
            break
        current = stack.pop()
        fd = None
        try:
            if _BY_FD:
                fd = os.open(current, _DIR_FLAGS)
            scanner = os.scandir(current if fd is None else fd)
        except OSError:
            if fd is not None:
                os.close(fd)
            unreadable += 1
            if current == start:
                result["readable"] = False
            continue
        with scanner:
            for entry in scanner:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(current + os.sep + entry.name)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        total += st.st_size
                        count += 1
                        if st.st_mtime > newest:
                            newest = st.st_mtime
                        if count >= max_files or (not count & 1023 and time.monotonic() > deadline):
                            cut = True
                            break
                except OSError:
                    unreadable += 1
        if fd is not None:
            os.close(fd)
    if cut:
        if warnings is not None:
            warnings.append(
                "%s: walk stopped after %d files (limits: %d files, %gs); sizes are partial"
                % (root, count, max_files, seconds)
            )
        result["readable"] = False
    result.update(bytes=total, files=count, newest_mtime=newest or None, unreadable_dirs=unreadable)
    return result


def not_walked(root: str) -> Dict[str, Any]:
    """A cache record for a folder that was not (or not yet) walked."""
    return {
        # a folder may be named with any character a file system allows: one line, escaped
        "path": escaped_name(root),
        "exists": os.path.lexists(root),
        "readable": False,
        "bytes": 0,
        "files": 0,
        "newest_mtime": None,
        "unreadable_dirs": 0,
        "error": None,
    }


def default_caches(environ: Dict[str, str]) -> List[Tuple[str, str]]:
    """torch inductor's and triton's cache directories, as they resolve them: inductor's
    $TORCHINDUCTOR_CACHE_DIR, else torchinductor_<user> in tempfile.gettempdir()'s folder
    ($TMPDIR, $TEMP or $TMP when a folder, else /tmp); triton's $TRITON_CACHE_DIR, else
    .triton/cache in $TRITON_HOME, else in the home folder."""
    inductor = environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not inductor:
        temp = next(
            (environ[k] for k in ("TMPDIR", "TEMP", "TMP") if os.path.isdir(environ.get(k) or "")),
            "/tmp",
        )
        # torch's default_cache_dir() replaces what a file name cannot hold
        name = "torchinductor_" + "".join("_" if c in '\\/:*?"<>|' else c for c in user())
        inductor = os.path.join(os.path.abspath(temp), name)
    triton = environ.get("TRITON_CACHE_DIR") or os.path.join(
        environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache"
    )
    return [("inductor", inductor), ("triton", triton)]


def hash_files(
    paths: List[str], roots: Roots, seconds: float = HASH_SECONDS
) -> List[Dict[str, Any]]:
    """Each path hashed, if ``roots`` admit it, all within ``seconds`` together."""
    deadline = time.monotonic() + seconds
    out = []
    for path in paths:
        full = named_by(os.path.abspath(os.path.expanduser(path)))
        if roots.admits(full):
            out.append(hash_file(full, deadline, seconds))
        else:
            out.append(_unhashed(full, OUTSIDE + " (--allow PATH reads it)"))
    return out


def _unhashed(path: str, why: str) -> Dict[str, Any]:
    return {"path": escaped_name(path), "sha256": None, "size": None, "mode": None, "error": why}


def hash_file(
    path: str, deadline: Optional[float] = None, seconds: float = HASH_SECONDS
) -> Dict[str, Any]:
    """sha256 and size of a regular file; an error string for anything else, or when the
    ``deadline`` (shared by all tracked files) passes."""
    path = os.path.abspath(os.path.expanduser(path))
    import hashlib

    digest = hashlib.sha256()
    size = 0
    try:
        fd = open_regular(path)
        mode = os.fstat(fd).st_mode & 0o7777
        with os.fdopen(fd, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                if deadline is not None and time.monotonic() > deadline:
                    return _unhashed(path, "not hashed: tracked files took over %gs" % seconds)
                digest.update(block)
                size += len(block)
    except OSError as exc:
        return _unhashed(path, exc.strerror or str(exc))
    return {
        "path": escaped_name(path),
        "sha256": digest.hexdigest(),
        "size": size,
        "mode": mode,
        "error": None,
    }
