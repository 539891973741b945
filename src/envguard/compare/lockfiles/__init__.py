"""Lockfile readers, one per format, and the drift of a snapshot against a lockfile."""

from __future__ import annotations

import re
from pathlib import Path

from envguard.compare.lockfiles.common import LockfileError, Pin, marker_env, read_toml
from envguard.compare.lockfiles.drift import lock_drift
from envguard.compare.lockfiles.pylock import read_pylock
from envguard.compare.lockfiles.requirements import read_requirements
from envguard.compare.lockfiles.uv import read_uv_lock
from envguard.snapshots.models import Snapshot

__all__ = ["LockfileError", "Pin", "lock_drift", "read_lock"]


def read_lock(path: Path, snapshot: Snapshot) -> dict[str, Pin]:
    """Pins from any supported lockfile, evaluated for the snapshot's interpreter."""
    if not path.exists():
        raise LockfileError(f"--lock {path}: no such file")
    if not path.is_file():
        raise LockfileError(f"--lock {path}: not a regular file")
    env = marker_env(snapshot)
    if path.name == "uv.lock":
        return read_uv_lock(path, env)
    if path.name == "pylock.toml" or re.fullmatch(r"pylock\.[^.]+\.toml", path.name):
        return read_pylock(path, env)
    if path.suffix == ".toml":
        data = read_toml(path)
        return read_pylock(path, env) if "lock-version" in data else read_uv_lock(path, env)
    return read_requirements(path, env)
