"""A cache of RECORD fingerprints on the target, so an unchanged venv is not hashed again.

Hashing every RECORD row is most of the probe's time (torch alone has ~15k rows). A RECORD
whose (path, device, inode, size, mtime_ns) is unchanged holds the same bytes as when its
fingerprint was computed: an installer rewrites RECORD on every (re)install, so a rebuilt
wheel of the same version gets a new inode and mtime and is hashed again.

The cache lives in the user's cache folder ($XDG_CACHE_HOME/envguard, else
~/.cache/envguard), never inside site-packages. It is a plain JSON map, read through the
capped regular-file reader; a damaged, foreign or unwritable cache is simply not used, and
nothing a cache holds is ever executed or shown.
"""

# ruff: noqa: UP006, UP035, UP045
from __future__ import annotations

import json
import os
import re

from .reading import read_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional

_NAME = "fingerprints-v1.json"
_CAP = 32 << 20
_MAX_ENTRIES = 100000
_FINGERPRINT = re.compile(r"[0-9a-f]{64}\Z")


def _ours(path: str) -> bool:
    """``path`` does not exist, or is no symlink, belongs to this user and no one else can
    write to it."""
    import stat

    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return (
        not stat.S_ISLNK(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def cache_path(environ: Dict[str, str]) -> Optional[str]:
    base = environ.get("XDG_CACHE_HOME") or (
        os.path.join(environ["HOME"], ".cache") if environ.get("HOME") else None
    )
    return os.path.join(base, "envguard", _NAME) if base and os.path.isabs(base) else None


class FingerprintCache:
    """RECORD stat key -> fingerprint; ``lookup`` before hashing, ``store`` after."""

    def __init__(self, path: Optional[str]) -> None:
        self.path = path
        self.entries: Dict[str, str] = {}
        self.used: Dict[str, str] = {}
        if path is None or not _ours(os.path.dirname(path)):
            self.path = None  # a folder someone else could fill (or a symlink): no cache
            return
        if os.path.lexists(path) and not _ours(path):
            return  # not ours to trust; rewritten below from what this run computes
        try:
            data = json.loads(read_bytes(path, _CAP).decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            return  # none yet, or not ours to trust: start afresh
        if isinstance(data, dict):
            self.entries = {
                k: v
                for k, v in data.items()
                if isinstance(k, str) and isinstance(v, str) and _FINGERPRINT.match(v)
            }

    @staticmethod
    def key(record_path: str) -> Optional[str]:
        try:
            st = os.stat(record_path)
        except OSError:
            return None
        # ctime too: a rewrite of the same size with the mtime put back still changes it.
        return "%s\0%d\0%d\0%d\0%d\0%d" % (
            record_path,
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
        )

    def lookup(self, key: Optional[str]) -> Optional[str]:
        found = self.entries.get(key) if key else None
        if found is not None and key is not None:
            self.used[key] = found
        return found

    def store(self, key: Optional[str], fingerprint: str) -> None:
        if key is not None:
            self.used[key] = fingerprint

    def save(self, scanned_sites: List[str]) -> None:
        """Write what this run used, plus other venvs' entries (capped); never fails."""
        if self.path is None or all(k in self.entries for k in self.used):
            return  # nothing new learned
        prefixes = tuple(os.path.join(s, "") for s in scanned_sites)
        kept = {k: v for k, v in self.entries.items() if not k.startswith(prefixes)}
        kept.update(self.used)
        if len(kept) > _MAX_ENTRIES:
            kept = dict(list(self.used.items())[:_MAX_ENTRIES])
        folder = os.path.dirname(self.path)
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if not _ours(folder):
                return
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(kept, fh, separators=(",", ":"))
            os.replace(tmp, self.path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
