"""Lockfile readers, one per format, and the drift of an environment against a lockfile."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

from envguard.compare.lockfiles.common import (
    LockfileError,
    LockRead,
    Pin,
    confined,
    lockfile_text,
    marker_env,
    parse_toml,
    read_lockfile_text,
)
from envguard.compare.lockfiles.drift import lock_drift, locks_drift
from envguard.compare.lockfiles.pylock import OutsideLock, read_pylock
from envguard.compare.lockfiles.requirements import read_requirements_lock
from envguard.compare.lockfiles.uv import read_uv_lock
from envguard.compare.selection import Selection, narrowed
from envguard.snapshots.models import Snapshot

__all__ = [
    "LockRead",
    "LockfileError",
    "OutsideLock",
    "Pin",
    "Selection",
    "lock_drift",
    "locks_drift",
    "read_lock",
]

STDIN = "-"


def read_lock(
    path: Path | str,
    snapshot: Snapshot | None,
    *,
    selection: Selection | None = None,
    freshness: bool = False,
    everywhere: bool = False,
    lenient: bool = False,
) -> LockRead:
    """Pins from any supported lockfile (``-``: stdin), evaluated for the snapshot's
    interpreter (this machine's, without one; ``everywhere``: for every environment of the
    lock's own Python range, each pin's extras, groups and markers kept as its scope). The
    format comes from the name, or from the content for stdin and unusual names.
    ``freshness``: also ask uv whether a project's own uv.lock still matches its
    pyproject.toml (the gate's question, not a lock diff's). ``lenient``: extras and groups
    the lock does not define are left out, with a note (one side of a lock change that
    adds a group), not refused."""
    chosen = selection or Selection()
    env = None if everywhere and snapshot is None else marker_env(snapshot)
    if str(path) == STDIN:
        text, where, real = _stdin(), "<stdin>", None
    else:
        real = Path(path)
        if not real.exists():
            raise LockfileError(f"--lock {real}: no such file")
        if not real.is_file():
            raise LockfileError(f"--lock {real}: not a regular file")
        confined(real, what="--lock")
        text, where = read_lockfile_text(real), str(real)
    kind = _kind(real.name if real is not None else "", text)
    note = None
    if (
        lenient
        and kind != "requirements"
        and (chosen.extras or chosen.groups or chosen.only_groups)
    ):
        chosen, note = narrowed(chosen, parse_toml(text, where=where), where=where)
    if kind == "uv":
        read = read_uv_lock(
            text, where=where, path=real, env=env, selection=chosen, freshness=freshness
        )
    elif kind == "pylock":
        base = real.parent if real is not None else Path.cwd()
        read = read_pylock(text, where=where, base=base, env=env, selection=chosen)
    else:
        read = read_requirements_lock(real or Path(where), env, text=text)
    return read if note is None else replace(read, notes=(note, *read.notes))


def _kind(name: str, text: str) -> str:
    if name == "uv.lock":
        return "uv"
    if name == "pylock.toml" or re.fullmatch(r"pylock\.[^.]+\.toml", name):
        return "pylock"
    if name.endswith((".txt", ".in")):
        return "requirements"
    head = text[:4096]
    if re.search(r"(?m)^lock-version\s*=", head):
        return "pylock"
    if re.search(r"(?m)^\[\[package\]\]", text) and re.search(r"(?m)^version\s*=\s*\d", head):
        return "uv"
    return "requirements"


def _stdin() -> str:
    from envguard.reading import LOCKFILE_CAP

    data = sys.stdin.buffer.read(LOCKFILE_CAP + 1)
    if len(data) > LOCKFILE_CAP:
        raise LockfileError(f"--lock -: stdin holds more than {LOCKFILE_CAP >> 20} MiB")
    return lockfile_text(data, where="--lock -")
