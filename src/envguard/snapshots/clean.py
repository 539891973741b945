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
    """The stamp of the files the comparison's answer is made by, this envguard's version,
    packaging's (the sections read versions and markers with it) and Python's; None when a
    file cannot be stat'ed or changed less than 2 s ago (then nothing is kept or used).

    Taken once a process, when the first of envguard.snapshots and envguard.compare is
    imported: before any of the files it stamps has loaded, so a file changed later never
    has the answers of the code loaded before it kept under its own stamp (a long-lived
    process that uses the API keeps the stamp of the code it runs)."""
    import sys

    import packaging

    from envguard.probe.payload_cache import settled, stamp

    loaded = {f"envguard.snapshots.{name[:-3]}" for name in _SNAPSHOT_CODE}
    if any(m in loaded or m.startswith("envguard.compare.") for m in list(sys.modules)):
        return None  # stamped after some of its files loaded: this process cannot vouch
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = [os.path.join(package, "snapshots", name) for name in _SNAPSHOT_CODE]
    for folder, subfolders, names in os.walk(os.path.join(package, "compare")):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    found = stamp(files)
    if found is None or not settled(files):
        return None  # git's racily clean case: an edit within the stamp's granularity
    return f"{__version__};packaging {packaging.__version__};{sys.version};{found}"


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
