"""The clean answers of the diff engine, kept (compare/identical.py says why an answer can
be): one empty file per answer, named by its snapshot's key and its live side's, in this
user's envguard cache folder (``$XDG_CACHE_HOME/envguard/clean``, else under
``~/.cache``), private as the probe's code cache beside it is (probe/loader.py: this
user's own folder that no one else can write, no symlink, a regular file). Someone who
can write there could make a drifted environment read as clean; the same person can
already change the code the probe runs from that folder (docs/security.md)."""

from __future__ import annotations

import os
from functools import cache

from envguard.probe.loader import keep_private, private_folder, read_private
from envguard.reading import envguard_cache
from envguard.version import __version__

# Answers kept; the oldest go first.
KEPT = 256
_SUFFIX = ".clean"
# What the engine's answer is a function of, besides the snapshot and the policy: the
# comparison (every module of compare/) and how a document becomes the model it compares.
_SNAPSHOT_CODE = ("models.py", "builders.py", "document.py", "shape.py", "checks.py")


@cache
def comparison_code() -> str | None:
    """The stamp of the files the comparison's answer is made by, and this envguard's
    version; None when one cannot be stat'ed (then nothing is kept or used)."""
    from envguard.probe.payload_cache import stamp

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = [os.path.join(package, "snapshots", name) for name in _SNAPSHOT_CODE]
    for folder, subfolders, names in os.walk(os.path.join(package, "compare")):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    found = stamp(files)
    return None if found is None else f"{__version__};{found}"


def _folder() -> str | None:
    found = envguard_cache(os.environ)
    return None if found is None else os.path.join(found, "clean")


def known(snapshot: str, live: str) -> bool:
    """Whether the engine found the snapshot of key ``snapshot`` clean against the live
    side of key ``live`` (compare.identical)."""
    folder = _folder()
    name = f"{snapshot}-{live}{_SUFFIX}"
    return folder is not None and read_private(os.path.join(folder, name), 0) is not None


def known_snapshot(snapshot: str) -> bool:
    """Whether the engine found the snapshot of key ``snapshot`` clean against some live
    side: a diff of it likely ends clean again (its engine is not loaded beside the
    probe, where it would compete with it for the cores)."""
    folder = _folder()
    if folder is None or not private_folder(folder):
        return False
    try:
        return any(name.startswith(snapshot + "-") for name in os.listdir(folder))
    except OSError:
        return False


def remember(snapshot: str, live: str) -> None:
    """Keep that answer (never fails: a cache that cannot be written is not written)."""
    folder = _folder()
    if folder is not None:
        keep_private(os.path.join(folder, f"{snapshot}-{live}{_SUFFIX}"), b"", "", _SUFFIX, KEPT)
