"""A cache of RECORD fingerprints on the target, so an unchanged venv is not hashed again.

Hashing every RECORD row is most of the probe's time (torch alone has ~15k rows). A RECORD
whose (path, device, inode, size, mtime_ns) is unchanged holds the same bytes as when its
fingerprint was computed: an installer rewrites RECORD on every (re)install, so a rebuilt
wheel of the same version gets a new inode and mtime and is hashed again.

The cache lives in the user's cache folder ($XDG_CACHE_HOME/envguard/fingerprints-v2, else
~/.cache/envguard/...), never inside site-packages: one small JSON file per venv (named by a
hash of its site-packages folders), so a probe reads only its own venv's entries however
many venvs this user has probed (one shared file grew to 5 MB of other venvs' entries and
took longer to load than hashing). At most _MAX_SHARDS files are kept, the least recently
written removed first. Each file is read through the capped regular-file reader; a damaged,
foreign or unwritable cache is simply not used, and nothing a cache holds is ever executed
or shown.
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

_FOLDER = "fingerprints-v2"
_LEGACY = "fingerprints-v1.json"  # the one shared file of earlier versions: removed
_CAP = 8 << 20
_MAX_ENTRIES = 20000  # per venv
_MAX_SHARDS = 256
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
    """The folder of the per-venv fingerprint files, or None when there is no home."""
    base = environ.get("XDG_CACHE_HOME") or (
        os.path.join(environ["HOME"], ".cache") if environ.get("HOME") else None
    )
    return os.path.join(base, "envguard", _FOLDER) if base and os.path.isabs(base) else None


class FingerprintCache:
    """RECORD stat key -> fingerprint for one venv; ``lookup`` before hashing, ``store``
    after, ``save`` once the venv was scanned."""

    def __init__(self, folder: Optional[str], sites: List[str]) -> None:
        import zlib

        self.path: Optional[str] = None
        self.entries: Dict[str, str] = {}
        self.used: Dict[str, str] = {}
        if folder is None or not (_ours(folder) and _ours(os.path.dirname(folder))):
            return  # a folder someone else could fill (or a symlink): no cache
        # Named by a checksum of the venv's site folders (no hashlib: 3 ms to load, and a
        # collision only makes two venvs share one file, keyed by full paths as ever).
        key = "\0".join(sites).encode("utf-8", "surrogateescape")
        self.path = os.path.join(folder, "%08x%08x.json" % (zlib.crc32(key), zlib.adler32(key)))
        if os.path.lexists(self.path) and not _ours(self.path):
            return  # not ours to trust; rewritten below from what this run computes
        try:
            data = json.loads(read_bytes(self.path, _CAP).decode("utf-8"))
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

    def save(self) -> None:
        """Write this venv's fingerprints when they changed; never fails."""
        if self.path is None or self.used == self.entries:
            return  # nothing new learned
        kept = dict(list(self.used.items())[:_MAX_ENTRIES])
        folder = os.path.dirname(self.path)
        tmp = "%s.%d.tmp" % (self.path, os.getpid())
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if not (_ours(folder) and _ours(os.path.dirname(folder))):
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
            return
        _prune(folder)


def _prune(folder: str) -> None:
    """At most _MAX_SHARDS venv files (the least recently written go first), and no legacy
    shared file; only this user's own regular files are removed."""
    import stat

    legacy = os.path.join(os.path.dirname(folder), _LEGACY)
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json")]
        if os.path.lexists(legacy) and _ours(legacy):
            os.unlink(legacy)
    except OSError:
        return
    if len(names) <= _MAX_SHARDS:
        return
    aged = []
    for name in names:
        try:
            st = os.lstat(os.path.join(folder, name))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            aged.append((st.st_mtime_ns, name))
    for _, name in sorted(aged)[: len(aged) - _MAX_SHARDS]:
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass
