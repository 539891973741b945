"""Compile caches and tracked files: sizes, counts and hashes, never following symlinks."""

# ruff: noqa: UP006, UP035
from __future__ import annotations

import hashlib
import os

from .reading import open_regular
from .system import user

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Tuple


def walk_tree(root: str) -> Dict[str, Any]:
    """Size, file count and newest mtime of a directory tree, never following symlinks."""
    result: Dict[str, Any] = {
        "path": root,
        "exists": False,
        "readable": True,
        "bytes": 0,
        "files": 0,
        "newest_mtime": None,
        "unreadable_dirs": 0,
    }
    # The root itself may be a symlink to scratch space: one hop cannot loop.
    start = os.path.realpath(root)
    if not os.path.isdir(start):
        result["exists"] = os.path.lexists(root)
        return result
    result["exists"] = True
    total = count = 0
    newest = 0.0
    unreadable = 0
    stack = [start]
    while stack:
        current = stack.pop()
        try:
            scanner = os.scandir(current)
        except OSError:
            unreadable += 1
            if current == start:
                result["readable"] = False
            continue
        with scanner:
            for entry in scanner:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        total += st.st_size
                        count += 1
                        if st.st_mtime > newest:
                            newest = st.st_mtime
                except OSError:
                    unreadable += 1
    result.update(bytes=total, files=count, newest_mtime=newest or None, unreadable_dirs=unreadable)
    return result


def default_caches(environ: Dict[str, str]) -> List[Tuple[str, str]]:
    """torch inductor's and triton's cache directories, as they resolve them."""
    inductor = environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        "/tmp", "torchinductor_" + user()
    )
    triton = environ.get("TRITON_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".triton", "cache"
    )
    return [("inductor", inductor), ("triton", triton)]


def hash_file(path: str) -> Dict[str, Any]:
    """sha256 and size of a regular file; an error string for anything else."""
    path = os.path.abspath(os.path.expanduser(path))
    digest = hashlib.sha256()
    size = 0
    try:
        fd = open_regular(path)
        with os.fdopen(fd, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
                size += len(block)
    except OSError as exc:
        return {"path": path, "sha256": None, "size": None, "error": exc.strerror or str(exc)}
    return {"path": path, "sha256": digest.hexdigest(), "size": size, "error": None}
